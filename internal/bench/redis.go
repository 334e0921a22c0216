package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/replicatorhq/replicator/internal/benchload"
	"github.com/replicatorhq/replicator/internal/freeport"
)

// Peers measured next to the sync scenario (Config.Peers).
const (
	// PeerRedis: a redis-server master and replica (child processes of the
	// redis-server on PATH, no persistence) on loopback; each producer is a
	// connection that sends SET (Config.MsgSize bytes) and WAIT 1 1000 in
	// one round trip (Via "redis"), and, the fair peer of a batching
	// client, RedisPipeline SETs then one WAIT per round trip (Via
	// "redis-p16").
	PeerRedis = "redis"
	// RedisPipeline is the SETs per round trip of the pipelined peer.
	RedisPipeline = 16
)

// redisNode is a redis-server child.
type redisNode struct {
	*child
	addr string
}

func (r *runner) startRedis(ctx context.Context, bin, name string, extra ...string) (*redisNode, error) {
	addrs, err := freeport.Addrs(1)
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addrs[0])
	dir := filepath.Join(r.dir, name)
	args := append([]string{"--port", port, "--bind", host, "--dir", r.dir, "--dbfilename", name + ".rdb",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, extra...)
	c, err := startChild(bin, name, dir+".log", "", args...)
	if err != nil {
		return nil, err
	}
	n := &redisNode{child: c, addr: addrs[0]}
	deadline := time.Now().Add(childStartTimeout)
	for {
		rc, err := dialRedis(ctx, n.addr)
		if err == nil {
			err = rc.ping()
			rc.close()
			if err == nil {
				return n, nil
			}
		}
		select {
		case <-c.Done():
			return nil, c.Exited()
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		case <-time.After(childPoll):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("%s did not answer PING within %s (log %s)", name, childStartTimeout, c.Log())
		}
	}
}

// redisPeer measures the Redis peer of the sync scenario.
func (r *runner) redisPeer(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("%w: --peers redis needs redis-server on PATH (apt-get install redis-server)", ErrConfig)
	}
	r.progress("sync peer redis: starting a redis-server master and replica (%s)", bin)
	m, err := r.startRedis(ctx, bin, "redis-master")
	if err != nil {
		return err
	}
	defer m.stop()
	host, port, _ := net.SplitHostPort(m.addr)
	rep, err := r.startRedis(ctx, bin, "redis-replica", "--replicaof", host, port)
	if err != nil {
		return err
	}
	defer rep.stop()
	if err := waitRedisReplica(ctx, m.addr); err != nil {
		return err
	}
	value := strings.Repeat("v", r.cfg.MsgSize)
	for _, p := range r.cfg.Producers {
		for _, pipe := range []int{1, RedisPipeline} {
			via := "redis"
			if pipe > 1 {
				via = fmt.Sprintf("redis-p%d", pipe)
			}
			var runs []run
			for i := range r.cfg.Runs {
				x, err := r.redisRun(ctx, m.addr, p, pipe, value)
				if err != nil {
					return fmt.Errorf("redis, %d clients, %d SETs per WAIT, run %d: %w", p, pipe, i+1, err)
				}
				runs = append(runs, x)
			}
			base := Result{Scenario: Sync, Store: "redis", Via: via, Producers: ptr(p), MsgSize: ptr(r.cfg.MsgSize), DurationS: ptr(r.cfg.Duration.Seconds())}
			res := r.summarize(base, runs)
			r.progress("sync peer %s, %d clients: %.0f SETs/s, p50 %.3f ms p99 %.3f ms (per SET; %d SETs per WAIT)", via, p, *res.MsgsPerS, *res.P50Ms, *res.P99Ms, pipe)
			r.emit(res)
		}
	}
	return nil
}

// waitRedisReplica waits until a WAIT on the master counts the replica.
func waitRedisReplica(ctx context.Context, addr string) error {
	rc, err := dialRedis(ctx, addr)
	if err != nil {
		return err
	}
	defer rc.close()
	deadline := time.Now().Add(childStartTimeout)
	for {
		n, err := rc.setWait([]string{"bench:ready"}, "1", 1, 100)
		if err != nil {
			return err
		}
		if n >= 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the redis replica did not acknowledge within %s", childStartTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(childPoll):
		}
	}
}

// redisRun is one measured point: a warm-up, then Duration of load.
func (r *runner) redisRun(ctx context.Context, addr string, clients, pipe int, value string) (run, error) {
	conns := make([]*redisConn, clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range conns {
		c, err := dialRedis(ctx, addr)
		if err != nil {
			return run{}, err
		}
		conns[i] = c
	}
	keys := make([][]string, clients)
	seq := make([]int, clients)
	put := func(_ context.Context, p int) (int64, bool, error) {
		ks := keys[p][:0]
		for range pipe {
			seq[p]++
			ks = append(ks, "k:"+strconv.Itoa(p)+":"+strconv.Itoa(seq[p]%100000))
		}
		keys[p] = ks
		n, err := conns[p].setWait(ks, value, 1, 1000)
		return 0, n >= 1, err
	}
	busy := r.waitQuiet(ctx)
	if r.cfg.Warmup > 0 {
		if st := benchload.Drive(ctx, benchload.Load{Producers: clients, Duration: r.cfg.Warmup}, put); st.FirstErr != nil {
			return run{}, fmt.Errorf("warm-up: %w", st.FirstErr)
		}
	}
	st := benchload.Drive(ctx, benchload.Load{Producers: clients, Duration: r.cfg.Duration}, put)
	if st.FirstErr != nil {
		return run{}, st.FirstErr
	}
	x := run{busy: busy, hasMsgs: true, hasLat: true}
	x.messages, x.elapsed = st.Puts*int64(pipe), st.Elapsed
	x.bytes = x.messages * int64(r.cfg.MsgSize)
	x.msgsps = float64(x.messages) / st.Elapsed.Seconds()
	x.mbps = x.msgsps * float64(r.cfg.MsgSize) / 1e6
	// Every SET of a round trip waits for the whole round trip.
	x.p50, x.p99, x.p999 = st.Percentile(0.5), st.Percentile(0.99), st.Percentile(0.999)
	x.notOK = st.NotOK * int64(pipe)
	return x, nil
}

// redisConn is a minimal RESP client: pipelined SETs and a WAIT.
type redisConn struct {
	c  net.Conn
	rd *bufio.Reader
	wr *bufio.Writer
}

func dialRedis(ctx context.Context, addr string) (*redisConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return &redisConn{c: c, rd: bufio.NewReaderSize(c, 64<<10), wr: bufio.NewWriterSize(c, 64<<10)}, nil
}

func (r *redisConn) close() { r.c.Close() }

func (r *redisConn) command(args ...string) {
	fmt.Fprintf(r.wr, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(r.wr, "$%d\r\n%s\r\n", len(a), a)
	}
}

// errRedis is an error reply.
var errRedis = errors.New("redis error reply")

// reply reads one simple reply: +status, -error or :integer.
func (r *redisConn) reply() (string, error) {
	line, err := r.rd.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("redis: reading a reply: %w", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("%w: empty reply", errRedis)
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%w: %s", errRedis, line[1:])
	}
	return "", fmt.Errorf("%w: unexpected reply %q", errRedis, line)
}

func (r *redisConn) ping() error {
	r.command("PING")
	if err := r.wr.Flush(); err != nil {
		return err
	}
	_, err := r.reply()
	return err
}

// setWait sends SET key value for each key and WAIT replicas timeoutMs in
// one write, and returns the replicas that acknowledged.
func (r *redisConn) setWait(keys []string, value string, replicas, timeoutMs int) (int, error) {
	for _, k := range keys {
		r.command("SET", k, value)
	}
	r.command("WAIT", strconv.Itoa(replicas), strconv.Itoa(timeoutMs))
	if err := r.wr.Flush(); err != nil {
		return 0, fmt.Errorf("redis: %w", err)
	}
	for range keys {
		if _, err := r.reply(); err != nil {
			return 0, err
		}
	}
	s, err := r.reply()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}
