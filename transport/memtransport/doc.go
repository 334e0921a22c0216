// Package memtransport is an in-memory transport.Transport for
// deterministic tests of the replication core: no sockets, no goroutines of
// its own, fake time inside testing/synctest bubbles, and seeded fault
// injection per link.
//
//	synctest.Test(t, func(t *testing.T) {
//		nw := memtransport.NewNetwork(memtransport.Config{Seed: 42})
//		master, slave := nw.Transport("master"), nw.Transport("slave")
//		ln, _ := master.Listen("mem:master")
//		link := nw.Link("slave", "mem:master")
//		link.SetFaults(memtransport.Faults{Delay: 2 * time.Millisecond, SplitWrites: 7})
//		c, _ := slave.Dial(ctx, "mem:master")
//		...
//		link.Partition(); time.Sleep(30 * time.Second); link.Heal() // fake time
//	})
//
// # Model
//
// A Network holds listeners by address (one namespace; "host:0" picks a free
// port) and Links. A Link is the path from a node (the name given to
// Network.Transport) to a listener address; its Faults, partition and resets
// apply to all its connections, present and future. Connections are
// net.Conn byte streams with deadlines, close and EOF semantics of TCP (the
// transporttest conformance suite checks them on both this package and
// tcptransport):
//
//   - each direction buffers at most Config.BufferSize bytes in flight; a
//     Write blocks while it is full (back-pressure, like a TCP window);
//   - Close of one end: the peer reads io.EOF after the bytes already
//     written, and its Writes fail with ErrBrokenPipe (EPIPE);
//   - a reset (fault, Link.Reset, listener closed before Accept): both ends
//     fail every later call with ErrReset (ECONNRESET); bytes in flight are
//     lost;
//   - Dial fails with ErrRefused (ECONNREFUSED) when nothing listens and
//     waits while the link is partitioned or the backlog is full, until ctx
//     ends.
//
// # Faults (Faults, per link, both directions)
//
//   - Delay and Jitter: a written byte becomes readable Delay (plus up to
//     Jitter) later; order is kept. Time-based: inside a synctest bubble the
//     fake clock jumps straight to the delivery time.
//   - SplitWrites: each write is cut into random pieces of
//     1..SplitWrites bytes and each Read returns at most one piece, so the
//     framing sees streams split at arbitrary bytes. Without it a Read
//     gathers everything delivered, as TCP coalesces segments (this matters
//     for the master's last-report-per-read rule).
//   - ResetAfterBytes, ResetProbability: reset a connection once so many
//     bytes crossed it (mid-frame, when chosen so), or at a Write with a
//     given probability.
//   - Partition/Heal: stall delivery (data and EOF, both directions) and new
//     dials until Heal; writes buffer up to BufferSize and then block.
//     Deadlines still fire, so idle timeouts can be tested.
//
// Every random decision comes from a generator per connection direction,
// seeded from Config.Seed, the link and the connection's sequence number on
// it: a run with the same seed and the same per-connection operations makes
// the same decisions whatever the goroutine interleaving.
//
// Config.Observe sees every connect, write (bytes as written), close and
// reset, in order, under the Network's lock.
//
// # Concurrency
//
// One mutex and one sync.Cond per Network guard everything; blocked calls
// wait on the Cond (durably blocked for synctest) and timers (deadlines,
// delivery times) wake them. A Network created inside a bubble must be used
// only inside it. Conns are safe for one reader and one writer at a time,
// plus Close and deadline calls from any goroutine, like net.Conn.
package memtransport
