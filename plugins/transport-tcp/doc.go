// Package tcptransport is replicator's default HA transport: real TCP with
// RocketMQ's socket settings, carrying the classic HA bytes of package
// transport unchanged (plugins/transport-tcp; the directory name has a
// hyphen, the package name cannot).
//
//	t := tcptransport.New(tcptransport.DefaultOptions())
//	ln, err := t.Listen("0.0.0.0:10912")                 // master's HA port
//	c, err := t.Dial(ctx, "10.0.0.1:10912")               // slave, 5 s connect timeout
//	fw := transport.NewFrameWriter(c)                      // framing lives in package transport
//
// # Sockets
//
// As RocketMQ's HAService and HAClient:
//   - TCP_NODELAY on both ends (Options.DisableNoDelay turns Nagle back on);
//   - SO_LINGER off: Close returns at once and the kernel sends what is
//     queued;
//   - SO_REUSEADDR on the listener (Go's default on Unix);
//   - SO_SNDBUF/SO_RCVBUF left at the OS default unless
//     Options.SendBufferSize/ReceiveBufferSize are set (RocketMQ swaps its
//     two properties; this package does not);
//   - a 5 s connect timeout (Options.ConnectTimeout), combined with the
//     caller's ctx: whichever ends first.
//
// Beyond RocketMQ, TCP keepalive is on (15 s, Options.KeepAlive) so a
// vanished peer is noticed even while a side is idle between heartbeats.
//
// Dialed and accepted connections are *net.TCPConn (or *tls.Conn), except
// with a connection limit (below), where an accepted connection embeds its
// *net.TCPConn to release its place on Close: every method is promoted,
// including the one net.Buffers looks for, so transport.FrameWriter's
// net.Buffers still become a single writev on plain TCP.
//
// # TLS
//
// RocketMQ's HA port has no authentication and no encryption; anything that
// connects and writes 8 bytes is a slave. Options.ServerTLS and
// Options.ClientTLS put TLS around the very same bytes (mutual TLS when the
// server config requires client certificates). Both ends must agree: a
// RocketMQ peer can only talk to a plain listener. The client handshake
// completes inside Dial, under the connect deadline. On the server, the
// listener runs each handshake in a goroutine of its own, bounded by
// ConnectTimeout, and Accept returns only connections whose handshake
// succeeded: a slow or hostile client never blocks the accept loop, and a
// failed handshake is a warning and a count
// (replicator_transport_tcp_tls_handshake_errors_total), not an Accept
// error. Closing the listener aborts handshakes in progress and waits for
// those goroutines.
//
// # Access control and limits
//
// The classic protocol has no handshake: anything that connects and writes
// 8 bytes is a slave, can read the whole commit log and, on a sync master,
// acknowledge messages. Three listener options, all checked at accept before
// a byte is read or a TLS handshake starts, so the core cannot tell them
// from plain TCP. They and the TLS configurations are the fields of
// transport.Security, which Options embeds (the one definition a host hands
// to any transport through transport.Securer; Transport.Secure applies it
// here):
//
//   - Options.Allow: the networks a peer's address must belong to
//     (ParseAllow reads "10.0.0.7,10.0.1.0/24,fd00::/8"); any other peer is
//     closed with one warning and
//     replicator_transport_tcp_refused_total{reason="not_allowed"}.
//   - Options.MaxConns and Options.MaxConnsPerIP: accepted connections open
//     at once, in all and per peer address (TLS handshakes in progress
//     count); over a limit, a connection is closed at once (reset) with one
//     warning and reason "max_conns" or "max_conns_per_ip". Open ones show
//     in replicator_transport_tcp_open_connections.
//   - Options.AllowClientNames: with mutual TLS, the client certificate's
//     common name or one of its DNS names must be listed, else the
//     handshake fails (logged and counted as a handshake error).
//
// A refused peer costs one accept, at most one log line and one close; it
// never reaches the caller's Accept. Warnings for refusals and failed
// handshakes are rate-limited: one line per reason and peer address per
// RefusalLogInterval (10 s), the next line saying how many were suppressed
// (suppressed=N), and a refusal for the allow list names --ha-allow in its
// hint; the metrics count every one (a burst of 900 refusals from one
// address is one line, not 900).
//
// # Observability
//
// Options.Logger (hclog, nil = silent) gets debug lines per dial and accept,
// rate-limited warnings for refused connections and failed server
// handshakes (above), and a
// warning when socket options fail. Options.Registerer (nil = none) gets
// replicator_transport_tcp_dials_total{result},
// replicator_transport_tcp_accepts_total,
// replicator_transport_tcp_refused_total{reason},
// replicator_transport_tcp_open_connections and
// replicator_transport_tcp_tls_handshake_errors_total; bytes, frames and
// connection states are counted by core, which sees the protocol.
package tcptransport
