package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/internal/benchload"
	"github.com/replicatorhq/replicator/internal/childproc"
)

// EchoArg is the argument that makes a child process one end of the
// cross-process round trips: LimitsConfig.EchoCmd is run with EchoArg and
// further arguments appended, and the program must then call EchoChild
// with those further arguments (`replicator bench` does, as does this
// package's test binary).
const EchoArg = "__rtt-echo"

// relayArg, after EchoArg, makes the child the middle of the chain.
const relayArg = "relay"

// rttSlices is how many alternating slices the round-trip time is split
// into when the round trips across processes are measured too, so that
// all see the same load.
const rttSlices = 4

// EchoChild runs the child's side of a round trip, args being what
// follows EchoArg: ADDR echoes to the parent at ADDR (Echo); "relay" ADDR
// is the middle of the three-process chain (relay).
func EchoChild(ctx context.Context, args []string) error {
	switch {
	case len(args) == 1:
		return Echo(ctx, args[0])
	case len(args) == 2 && args[0] == relayArg:
		return relay(ctx, args[1])
	}
	return fmt.Errorf("%w: round-trip child: arguments %q", ErrConfig, args)
}

// Echo is the echoing end of a round trip across processes: it dials addr
// and writes back every 8 bytes it reads, until the other end closes the
// connection (nil) or ctx ends (ctx's error).
func Echo(ctx context.Context, addr string) error {
	c, stop, err := dialUntil(ctx, addr)
	if err != nil {
		return fmt.Errorf("bench: echo: %w", err)
	}
	defer stop()
	return ended(ctx, "echo", echoLoop(c))
}

// echoLoop writes back every 8 bytes it reads from c, until a read or a
// write fails (its error).
func echoLoop(c net.Conn) error {
	var b [8]byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return err
		}
		if _, err := c.Write(b[:]); err != nil {
			return err
		}
	}
}

// relay is the middle of the chain parent -> relay -> echo -> relay ->
// parent, as a master between a producer and a slave with no processing:
// it dials the parent at addr, sends it the port it listens on (8 bytes,
// little-endian), accepts the echo child there, and then passes each 8
// bytes from the parent to the echo child and its answer back, until the
// parent closes the connection (nil) or ctx ends (ctx's error).
func relay(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: relay: %w", err)
	}
	defer ln.Close()
	p, stop, err := dialUntil(ctx, addr)
	if err != nil {
		return fmt.Errorf("bench: relay: %w", err)
	}
	defer stop()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(ln.Addr().(*net.TCPAddr).Port))
	if _, err := p.Write(b[:]); err != nil {
		return ended(ctx, "relay", err)
	}
	stopLn := context.AfterFunc(ctx, func() { ln.Close() })
	s, err := ln.Accept()
	stopLn()
	if err != nil {
		return ended(ctx, "relay", err)
	}
	defer s.Close()
	stopS := context.AfterFunc(ctx, func() { s.Close() })
	defer stopS()
	for {
		if _, err := io.ReadFull(p, b[:]); err != nil {
			return ended(ctx, "relay", err)
		}
		_, err := s.Write(b[:])
		if err == nil {
			_, err = io.ReadFull(s, b[:])
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("bench: relay: the echo child: %w", err) // EOF too
		}
		if _, err := p.Write(b[:]); err != nil {
			return ended(ctx, "relay", err)
		}
	}
}

// dialUntil dials addr; stop closes the connection, which the end of ctx
// does too.
func dialUntil(ctx context.Context, addr string) (net.Conn, func(), error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	return c, func() { stop(); c.Close() }, nil
}

// ended is what a child's loop returns after err: ctx's error once ctx
// has ended, nil for the end of the stream from the parent, else err.
func ended(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("bench: %s: %w", what, err)
}

// rttPath is one round trip measured by roundTrips.
type rttPath struct {
	what string // in error messages
	conn net.Conn
	lat  []time.Duration
	took time.Duration
}

// roundTrips measures the 8-byte request/ack round trip with both ends in
// this process (a goroutine echoing) for c.RTTDuration; and, when
// c.EchoCmd is set, for as long each, with the echoing end in a child
// process and along the chain of three processes this one -> relay child
// -> echo child -> relay child -> this one: in rttSlices alternating
// slices, on connections held open throughout.
func roundTrips(ctx context.Context, dir string, c LimitsConfig, l *Limits) error {
	in, stopIn, err := echoInProcess(ctx)
	if err != nil {
		return err
	}
	defer stopIn()
	paths := []*rttPath{{what: "round trip", conn: in}}
	var stops []func() error
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	if len(c.EchoCmd) > 0 {
		x, stopX, err := echoChild(ctx, dir, c.EchoCmd)
		if err != nil {
			return err
		}
		stops = append(stops, stopX)
		ch, stopCh, err := chainChildren(ctx, dir, c.EchoCmd)
		if err != nil {
			return err
		}
		stops = append(stops, stopCh)
		paths = append(paths, &rttPath{what: "round trip across processes", conn: x}, &rttPath{what: "round trip along three processes", conn: ch})
	}
	n := 1
	if len(paths) > 1 {
		n = rttSlices
	}
	for range n {
		for _, p := range paths {
			t0 := time.Now()
			if p.lat, err = pingLoop(ctx, p.conn, c.RTTDuration/time.Duration(n), p.lat); err != nil {
				return fmt.Errorf("bench: %s: %w", p.what, err)
			}
			p.took += time.Since(t0)
		}
	}
	pcts := func(p *rttPath) (time.Duration, time.Duration) {
		slices.Sort(p.lat)
		return benchload.Percentile(p.lat, 0.5), benchload.Percentile(p.lat, 0.99)
	}
	l.RTTP50, l.RTTP99 = pcts(paths[0])
	l.RoundTrips = float64(len(paths[0].lat)) / paths[0].took.Seconds()
	if len(paths) > 1 {
		l.XProcRTTP50, l.XProcRTTP99 = pcts(paths[1])
		l.ChainRTTP50, l.ChainRTTP99 = pcts(paths[2])
		var errs []error
		for _, stop := range stops {
			errs = append(errs, stop())
		}
		stops = nil
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("bench: round trips across processes: %w", err)
		}
	}
	return ctx.Err()
}

// pingLoop sends 8 bytes on c and waits for 8 back, one in flight, for d,
// appending each round trip's time to lat.
func pingLoop(ctx context.Context, c net.Conn, d time.Duration, lat []time.Duration) ([]time.Duration, error) {
	var b [8]byte
	start := time.Now()
	for i := uint64(0); time.Since(start) < d && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if err := ping(c, &b, i); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

// ping sends i in b on c and reads the echo into b.
func ping(c net.Conn, b *[8]byte, i uint64) error {
	binary.LittleEndian.PutUint64(b[:], i)
	if _, err := c.Write(b[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint64(b[:]); got != i {
		return fmt.Errorf("echo answered %d to %d", got, i)
	}
	return nil
}

// echoInProcess returns a connection whose other end, in a goroutine of
// this process, writes back every 8 bytes it reads; stop closes the
// connection and waits for the goroutine.
func echoInProcess(ctx context.Context) (net.Conn, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: round trip: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		echoLoop(c)
	}()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		<-done
		return nil, nil, fmt.Errorf("bench: round trip: %w", err)
	}
	return c, func() { c.Close(); ln.Close(); <-done }, nil
}

// echoChild starts cmd with EchoArg and an address appended as a child
// process, its output in dir/rtt-echo.log, and returns the connection it
// dialled. stop closes the connection and waits for the child's exit
// (stopChildren).
func echoChild(ctx context.Context, dir string, cmd []string) (net.Conn, func() error, error) {
	c, p, err := startDialer(ctx, dir, "round-trip echo", "rtt-echo.log", cmd)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: round trip across processes: %w", err)
	}
	return c, func() error { return stopChildren(c, p) }, nil
}

// chainChildren starts the relay child (dir/rtt-relay.log) and the echo
// child that dials it (dir/rtt-chain-echo.log), and returns the
// connection from the relay after one round trip along the chain. stop
// closes it and waits for both children's exits (stopChildren).
func chainChildren(ctx context.Context, dir string, cmd []string) (net.Conn, func() error, error) {
	c, relay, err := startDialer(ctx, dir, "round-trip relay", "rtt-relay.log", cmd, relayArg)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: round trip along three processes: %w", err)
	}
	var b [8]byte
	err = await(ctx, "the relay's port", func() { c.SetDeadline(time.Unix(1, 0)) }, func() error {
		_, err := io.ReadFull(c, b[:])
		return err
	}, relay)
	port := binary.LittleEndian.Uint64(b[:])
	if err == nil && (port == 0 || port > 65535) {
		err = fmt.Errorf("the relay sent port %d", port)
	}
	if err != nil {
		abortChildren(c, relay)
		return nil, nil, fmt.Errorf("bench: round trip along three processes: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.FormatUint(port, 10))
	echo, err := childproc.Start(childproc.Config{Exe: cmd[0], Args: append(slices.Clone(cmd[1:]), EchoArg, addr),
		Name: "round-trip chain echo", Log: filepath.Join(dir, "rtt-chain-echo.log")})
	if err != nil {
		abortChildren(c, relay)
		return nil, nil, fmt.Errorf("bench: round trip along three processes: %w", err)
	}
	// The first round trip waits for the echo child to reach the relay.
	err = await(ctx, "the first round trip", func() { c.SetDeadline(time.Unix(1, 0)) }, func() error {
		return ping(c, &b, 1)
	}, relay, echo)
	if err != nil {
		abortChildren(c, relay, echo)
		return nil, nil, fmt.Errorf("bench: round trip along three processes: %w", err)
	}
	return c, func() error { return stopChildren(c, relay, echo) }, nil
}

// startDialer starts cmd with EchoArg, args and an address to dial
// appended as a child process named name, its output in dir/log, and
// returns the connection it dialled.
func startDialer(ctx context.Context, dir, name, log string, cmd []string, args ...string) (net.Conn, *childproc.Proc, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	args = append(append(append(slices.Clone(cmd[1:]), EchoArg), args...), ln.Addr().String())
	p, err := childproc.Start(childproc.Config{Exe: cmd[0], Args: args, Name: name, Log: filepath.Join(dir, log)})
	if err != nil {
		return nil, nil, err
	}
	var c net.Conn
	err = await(ctx, "the "+name+" connecting", func() { ln.Close() }, func() error {
		var err error
		c, err = ln.Accept()
		return err
	}, p)
	if err != nil {
		if c != nil {
			c.Close()
		}
		p.Stop(childStopTimeout)
		return nil, nil, err
	}
	return c, p, nil
}

// await runs fn in a goroutine and waits until it returns (its error),
// one of procs exits (its exit status and log), ctx ends (ctx's error) or
// childStartTimeout passes; in all but the first case it calls abort,
// which must make fn return, and waits for fn.
func await(ctx context.Context, what string, abort func(), fn func() error, procs ...*childproc.Proc) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	quit := make(chan struct{})
	defer close(quit)
	exited := make(chan *childproc.Proc, len(procs))
	for _, p := range procs {
		go func() {
			select {
			case <-p.Done():
				exited <- p
			case <-quit:
			}
		}()
	}
	t := time.NewTimer(childStartTimeout)
	defer t.Stop()
	var err error
	select {
	case err := <-done:
		return err
	case p := <-exited:
		err = fmt.Errorf("%w: %w", p.Exited(), p.Err())
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("%s: not within %s", what, childStartTimeout)
	}
	abort()
	<-done
	return err
}

// abortChildren closes c and stops each of procs at once (SIGTERM, then
// SIGKILL after childStopTimeout): a relay still waiting for its echo
// child does not see the end of c.
func abortChildren(c net.Conn, procs ...*childproc.Proc) {
	c.Close()
	for _, p := range procs {
		p.Stop(childStopTimeout)
	}
}

// stopChildren closes c, waits up to childStopTimeout for each of procs to
// exit on its own (the end of c ends the echo and the relay, and the
// relay's end the chain's echo), then stops it (SIGTERM, then SIGKILL
// after childStopTimeout); the error names each child that did not exit
// with code 0.
func stopChildren(c net.Conn, procs ...*childproc.Proc) error {
	c.Close()
	t := time.NewTimer(childStopTimeout)
	defer t.Stop()
	var errs []error
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-t.C:
		}
		errs = append(errs, p.Stop(childStopTimeout))
	}
	return errors.Join(errs...)
}
