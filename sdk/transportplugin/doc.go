// Package transportplugin carries a transport.Transport across a process
// boundary with hashicorp/go-plugin, control only: the plugin listens,
// accepts, dials and applies its connection policy (socket options, address
// filters, proxies, whatever it likes), then hands each connected kernel
// socket to the host as a file descriptor; the host does every read and
// write, so the replicated bytes never cross the process boundary and an
// external transport moves them as fast as a builtin one.
//
// A transport author writes an ordinary transport.Transport (the interface
// the builtin tcp transport implements) and a one-line main:
//
//	func main() { transportplugin.Serve("mytransport", "1.0.0", open) }
//
// where open is an Opener (it gets the daemon's transport settings in an
// OpenRequest). The binary is named replicator-transport-<name> and goes in
// the daemon's --plugins DIR; --transport <name> selects it (an external
// plugin overrides the builtin of its name). transportplugintest.Run runs
// transport/transporttest's conformance suite against the transport through
// this package's shim, in process:
//
//	func TestConformance(t *testing.T) { transportplugintest.Run(t, open) }
//
// # The contract a transport must meet
//
//   - Every net.Conn its listeners accept and its Dial returns is a kernel
//     socket: it implements syscall.Conn (*net.TCPConn, *net.UnixConn, or a
//     wrapper that exposes the socket's SyscallConn). Anything else fails
//     with ErrNoHandoff (the Dial fails; an accepted connection is logged
//     and dropped).
//   - Nothing of the replication stream may live in the plugin's memory:
//     once the connection is handed over, the SDK closes the plugin's
//     descriptor and the host reads and writes the socket directly. A
//     transport may exchange bytes of its own on the socket before handing
//     it over (a proxy or authentication preamble), as long as it has not
//     read or buffered any byte beyond its preamble.
//   - Hence the limit: a transport whose bytes need userland state cannot
//     hand off descriptors. TLS inside the plugin is the common case (the
//     session keys and record layer live in the process that ran the
//     handshake; a *tls.Conn has no SyscallConn). TLS stays in the host's
//     builtin tcp transport (plugins/transport-tcp, ServerTLS/ClientTLS),
//     and so does any transport that compresses, encrypts or frames bytes.
//   - Close on the plugin's connections must only release the plugin's
//     descriptor (no shutdown(2)): the socket lives on in the host.
//   - Socket options set in the plugin (TCP_NODELAY, buffers, keepalive)
//     belong to the socket and stay in effect in the host.
//   - Only unix systems can pass descriptors (SCM_RIGHTS); elsewhere Open
//     fails and the transport must be builtin.
//
// # How it works
//
//	host (Client, a transport.Transport)           plugin (server)
//	------------------------------------           ---------------
//	Open ── gRPC: options, socket path, token ──▶  Opener; dials the host's
//	     ◀── unix socket (private dir, token) ───  descriptor channel
//	Listen(addr) ── gRPC Listen{id, addr} ─────▶   tr.Listen; accept loop:
//	Accept() ◀── record{accepted, id} + fd ─────   each connection's socket
//	Dial(ctx, addr) ── gRPC Dial{id, addr} ────▶   tr.Dial (ctx deadline);
//	     ◀── record{dialed, id} + fd, then OK ──   socket handed over first
//	net.Conn: the host's own *net.TCPConn; reads and writes never leave it
//
// The descriptor channel is a unix stream socket the host creates in a
// private directory (mode 0700) and names, with a 32-byte random token, in
// the Open call (on go-plugin's gRPC connection, under AutoMTLS when the
// host enables it); the plugin dials it and writes the token first, the
// host accepts only that connection and removes the socket. Then the plugin
// writes 16-byte records, one descriptor (SCM_RIGHTS) attached to the
// first byte of each record of type dialed or accepted:
//
//	 0      1             4                      12            16
//	+------+-------------+----------------------+-------------+
//	| type | reserved 0  | id              u64  | reserved 0  |
//	+------+-------------+----------------------+-------------+
//	type 1 dialed: the connection of the Dial request id (host-chosen)
//	type 2 accepted: a connection accepted by the listener id (host-chosen)
//	type 3 ended: the listener id stopped on its own (no descriptor)
//
// A descriptor nobody waits for any more (a Dial that gave up, a closed
// listener) is closed by the host. A listener holds up to
// ClientConfig.AcceptQueue accepted connections for Accept; beyond that new
// ones are closed with a warning. Closing a listener (host side) stops the
// plugin's listener; accepted connections stay open.
//
// # Failures
//
// Errors cross through one table: ErrNoHandoff and ErrClosed keep their
// identity, context cancellation and deadlines come back as context.Canceled
// and context.DeadlineExceeded (the Dial's ctx bounds the plugin's connect),
// and a plugin process that is gone turns Listen, Dial and Accept into
// plugin.ErrPluginShutdown. Connections already handed over keep working
// after the plugin dies: they are the host's sockets. The daemon does not
// restart a crashed transport plugin (internal/pluginhost): the plugin held
// the master's listening socket and its connection policy, so the node
// stops cleanly (exit 1) and its supervisor restarts it.
package transportplugin
