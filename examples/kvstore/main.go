// Command kvstore is a small key-value store that uses replicator as its
// log: a leader takes writes (PUT and DELETE of a key), appends each one as
// a RocketMQ message to its commit log through a replicator master, and a
// follower (a replicator slave) receives the log over RocketMQ's classic HA
// protocol, applies it and serves reads. Either side rebuilds its state by
// replaying its own log when it starts. See README.md.
//
//	kvstore leader   --data DIR --http ADDR --ha ADDR [--replication sync|async]
//	kvstore follower --data DIR --http ADDR --leader HA_ADDR
//	kvstore put      --addr ADDR KEY VALUE
//	kvstore get      --addr ADDR KEY
//	kvstore delete   --addr ADDR KEY
//	kvstore status   --addr ADDR [--wait] [--wait-connected] [--wait-caught-up LEADER_ADDR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1 // an error, or (get) a key that is not there
	exitUsage    = 2
	exitNotPutOK = 3 // put/delete: stored on the leader, not confirmed on a follower
)

const usage = `kvstore - a key-value store replicated with replicator

Usage:
  kvstore leader   --data DIR --http ADDR --ha ADDR [--replication sync|async] [--sync-timeout D] [--segment-size BYTES]
  kvstore follower --data DIR --http ADDR --leader HA_ADDR [--reconnect-delay D] [--segment-size BYTES]
  kvstore put      [--addr ADDR] KEY VALUE
  kvstore get      [--addr ADDR] KEY
  kvstore delete   [--addr ADDR] KEY
  kvstore status   [--addr ADDR] [--wait] [--wait-connected] [--wait-caught-up ADDR]

Run 'kvstore COMMAND --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("kvstore "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch cmd {
	case "leader", "follower":
		cfg := nodeConfig{}
		fs.StringVar(&cfg.Data, "data", "./data/"+cmd, "data directory (the commit log goes in DIR/commitlog)")
		fs.StringVar(&cfg.HTTP, "http", "127.0.0.1:8080", "HTTP API address")
		fs.Int64Var(&cfg.SegmentSize, "segment-size", 64<<20, "commit-log segment size in bytes, a multiple of 4096; leader and follower must agree")
		logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
		if cmd == "leader" {
			fs.StringVar(&cfg.HA, "ha", "127.0.0.1:8081", "HA address followers connect to")
			fs.StringVar(&cfg.Replication, "replication", "sync", "sync: a write returns once a follower holds it; async: once the leader's log holds it")
			fs.DurationVar(&cfg.SyncTimeout, "sync-timeout", 5*time.Second, "sync: how long a write waits for a follower")
		} else {
			fs.StringVar(&cfg.Leader, "leader", "127.0.0.1:8081", "the leader's HA address")
			fs.DurationVar(&cfg.ReconnectDelay, "reconnect-delay", time.Second, "wait before reconnecting to the leader")
			cfg.SyncTimeout = 5 * time.Second
		}
		if code, ok := parse(fs, args, 0); !ok {
			return code
		}
		if cfg.Replication != "" && cfg.Replication != "sync" && cfg.Replication != "async" {
			fmt.Fprintf(stderr, "kvstore: --replication %q: want sync or async\n", cfg.Replication)
			return exitUsage
		}
		log := hclog.New(&hclog.LoggerOptions{Name: "kvstore." + cmd, Level: hclog.LevelFromString(*logLevel), Output: stderr})
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := runNode(ctx, cfg, cmd == "leader", log); err != nil {
			log.Error("stopped", "error", err)
			return exitError
		}
		return exitOK
	case "put", "get", "delete", "status":
		c := client{}
		fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "the node's HTTP address (put and delete: the leader's)")
		fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "request timeout")
		var w waitOpts
		if cmd == "status" {
			fs.Lookup("timeout").Usage = "request timeout; with a wait flag, the longest wait"
			fs.BoolVar(&w.ready, "wait", false, "first wait, at most --timeout, until the node serves")
			fs.BoolVar(&w.connected, "wait-connected", false, "first wait, at most --timeout, until a follower is connected to its leader (on a leader: until a follower is connected)")
			fs.StringVar(&w.caughtUp, "wait-caught-up", "", "first wait, at most --timeout, until the node has applied the log the node at this `ADDR` (the leader) holds when the wait starts")
		}
		want := map[string]int{"put": 2, "get": 1, "delete": 1, "status": 0}[cmd]
		if code, ok := parse(fs, args, want); !ok {
			return code
		}
		if w.any() {
			if err := c.wait(w); err != nil {
				fmt.Fprintf(stderr, "kvstore: %v\n", err)
				return exitError
			}
		}
		err := c.do(cmd, fs.Args(), stdout)
		switch {
		case errors.Is(err, errNotPutOK):
			fmt.Fprintf(stderr, "kvstore: %v\n", err)
			return exitNotPutOK
		case err != nil:
			fmt.Fprintf(stderr, "kvstore: %v\n", err)
			return exitError
		}
		return exitOK
	default:
		fmt.Fprintf(stderr, "kvstore: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// parse parses fs and checks the number of arguments.
func parse(fs *flag.FlagSet, args []string, nargs int) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() != nargs {
		fmt.Fprintf(fs.Output(), "%s: want %d arguments, got %d\n", fs.Name(), nargs, fs.NArg())
		fs.Usage()
		return exitUsage, false
	}
	return 0, true
}
