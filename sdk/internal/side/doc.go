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
// A FrameConn carries protobuf messages on a channel, each framed by its
// length:
//
//	 0                4                       4+len
//	+----------------+-----------------------+
//	| len  u32 (BE)  | protobuf message      |
//	+----------------+-----------------------+
//
// len is checked against the connection's bound (MaxFrame) before anything
// is allocated; a longer frame fails with ErrFrameTooLarge.
package side
