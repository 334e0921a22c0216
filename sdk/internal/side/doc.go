// Package side is the side channel between a host and a plugin process: a
// plain unix socket next to go-plugin's gRPC connection, for what gRPC
// cannot carry (file descriptors, sdk/transportplugin) or carries with too
// much latency for a round trip per batch (a store's append stream,
// sdk/storeplugin).
//
// The host listens on a fresh socket in a new private directory (mode 0700,
// Listen) and sends the path and a random 32-byte token on the gRPC control
// plane (under AutoMTLS when the host enables it); the plugin dials the path
// and writes the token first (Dial); the host accepts the first connection
// that presents it and removes the socket (Listener.Accept). The channel
// exists only between the two processes.
//
// A FrameConn carries frames on a channel: a small protobuf message (the
// metadata: sequence numbers, offsets, results) and raw parts (the
// payload: message bodies, commit-log bytes, stored records) that never go
// through the protobuf encoder. All integers are big-endian:
//
//	 0          4          8          12            12+4n        12+4n+mlen   4+len
//	+----------+----------+----------+-------------+-------------+-------------+
//	| len u32  | mlen u32 | n u32    | part length | message     | parts       |
//	|          |          |          | u32 × n     | (mlen bytes)| (Σ lengths) |
//	+----------+----------+----------+-------------+-------------+-------------+
//
//	len   the bytes after the len field: 8 + 4n + mlen + the parts' lengths
//	mlen  the length of the protobuf message
//	n     the number of parts (at most MaxParts); part i is the i-th slice of
//	      the payload, of the i-th length
//
// The reader checks len against the connection's bound (NewFrameConn's
// maxFrame, 64 MiB on a store's channels) before allocating anything (a longer frame fails with
// ErrFrameTooLarge), then that n, mlen and the part lengths add up to len
// (else ErrBadFrame). The writer sends the header, the lengths and the
// message from one buffer and the parts from the caller's slices with one
// writev (QueueParts and Flush put several frames in one writev); the reader reads the payload straight into a buffer it reuses
// (ReadShared) or one the caller keeps (ReadOwned, or ReadInto with the
// caller's own buffer, from a pool). Which field of the
// message a part belongs to is the caller's convention (sdk/storeplugin:
// part i is op i's payload in a batch, op i's stored record in an ack, and
// a chunk's bytes).
//
// The socket's send and receive buffers are raised to 1 MiB (capped by the
// kernel's net.core.[rw]mem_max), so a 256 KiB batch or chunk goes in one
// write and one read. On Linux a FrameConn reads and writes with raw
// system calls on the runtime poller's non-blocking descriptor
// (rawio_linux.go): no runtime system-call bookkeeping, which would wake the
// runtime's monitor thread each time an idle process makes its first call.
package side
