// Package grpcopt holds the gRPC settings every plugin connection uses on
// both ends: a 64 MiB message bound (gRPC's own 4 MiB receive limit is too
// small for a batch of large records), large HTTP/2 windows and socket
// buffers for the data-carrying streams, and gRPC's proto codec over a
// buffer pool that does not zero (codec.go). The wire format is gRPC's
// "proto" codec unchanged.
package grpcopt
