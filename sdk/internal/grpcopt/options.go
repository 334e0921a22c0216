package grpcopt

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// MaxMessageBytes bounds one gRPC or side-channel message in either
// direction.
const MaxMessageBytes = 64 << 20

// Large HTTP/2 windows and socket buffers: the data-carrying streams (append
// batches, read chunks) move 256 KiB-1 MiB messages.
const (
	streamWindow = 8 << 20
	connWindow   = 16 << 20
	sockBuffer   = 256 << 10
)

// ServerOptions are the gRPC server options every plugin uses.
func ServerOptions() []grpc.ServerOption {
	return append(codecServerOptions(),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ReadBufferSize(sockBuffer),
		grpc.WriteBufferSize(sockBuffer),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
}

// DialOptions are the gRPC dial options the host uses to match
// ServerOptions.
func DialOptions() []grpc.DialOption {
	return append(codecDialOptions(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithReadBufferSize(sockBuffer),
		grpc.WithWriteBufferSize(sockBuffer),
	)
}
