// Command replicator runs a master or a slave of a replica group, talks to a
// running node (put, status, tail), and demonstrates replication on one
// machine (demo). See README.md in this directory for the command reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotPutOK = 3 // put: stored, but not every status was PUT_OK
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}

// env is what a command runs with.
type env struct {
	opts   *options
	args   []string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	log    hclog.Logger
	// sources says where each option's value came from (by flag name).
	sources map[string]config.Source
	// plugins is the plugin host of master and slave (plugins.go).
	plugins *pluginState
	// environ is the process environment (REPLICATOR_API_TOKEN).
	environ []string
}

// run parses args and runs the command; it returns the exit code.
func run(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts := &options{}
	prog := program(opts)
	res, err := prog.Parse(args, environ)
	if errors.Is(err, config.ErrHelp) {
		prog.Usage(stdout, res.Command)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "replicator: %v\n", err)
		if res != nil && res.Command != nil {
			fmt.Fprintf(stderr, "Run 'replicator %s --help' for usage.\n", res.Command.Name)
		} else {
			fmt.Fprintf(stderr, "Run 'replicator --help' for usage.\n")
		}
		return exitUsage
	}
	if res.Command == nil {
		prog.Usage(stderr, nil)
		return exitUsage
	}
	e := &env{opts: opts, args: res.Args, stdin: stdin, stdout: stdout, stderr: stderr, sources: res.Sources, environ: environ}
	e.log = newLogger(opts.global, stderr)
	applyGC(res.Command.Name, opts.global, res.Sources, environ) // gc.go

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, a second one kills the process the
		// default way instead of waiting for a graceful shutdown.
		<-ctx.Done()
		stop()
	}()

	var code int
	switch res.Command.Name {
	case "master", "slave":
		code = runNode(ctx, e, res.Command.Name)
	case "put":
		code = runPutClient(ctx, e) // put_client.go
	case "status":
		code = runStatus(ctx, e)
	case "tail":
		code = runTail(ctx, e)
	case "plugins":
		code = runPlugins(ctx, e)
	case "demo":
		code = runDemo(ctx, e)
	case "bench":
		code = runBench(ctx, e)
	case "promote", "demote":
		code = runRole(ctx, e, res.Command.Name)
	case "controller":
		code = runController(ctx, e)
	case "node":
		code = runNodeCmd(ctx, e) // nodecmd.go
	case "version":
		fmt.Fprintf(stdout, "replicator %s (%s %s/%s)\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		reg := pluginhost.Builtin()
		fmt.Fprintf(stdout, "builtin store plugins: %v\nbuiltin transport plugins: %v\n", reg.StoreNames(), reg.TransportNames())
	}
	return code
}

func newLogger(g globalOpts, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "replicator",
		Level:      hclog.LevelFromString(g.LogLevel),
		JSONFormat: g.LogFormat == "json",
		Output:     w,
		Color:      hclog.ColorOff,
	})
}

// versionString is the build's version: -X main.version, else the module
// version, else "dev".
func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// usageError is an invalid option value or combination found after parsing
// (a token file too short, TLS files that do not load, options that
// conflict): like a parse error, it exits with exitUsage.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// usage marks err (when not nil) as a usageError.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// failErr prints err for a command and returns exitUsage for a usageError,
// else exitError.
func (e *env) failErr(prefix string, err error) int {
	fmt.Fprintf(e.stderr, "replicator: %s: %v\n", prefix, err)
	if errors.As(err, new(usageError)) {
		return exitUsage
	}
	return exitError
}

// fail prints an error for a command and returns exitError.
func (e *env) fail(format string, args ...any) int {
	fmt.Fprintf(e.stderr, "replicator: "+format+"\n", args...)
	return exitError
}
