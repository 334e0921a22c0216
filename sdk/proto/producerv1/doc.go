// Package producerv1 is generated from producer.proto (protoc-gen-go, protoc-gen-go-grpc) by
// sdk/proto/gen.sh (`make proto`); never edit the .pb.go files by hand. It is
// the wire contract of a node's producer stream (internal/api serves it);
// Go producers use the client package.
//
// Besides the messages of producer.proto, the node sends one header with
// the response headers of every Put stream:
//
//	replicator-idle-timeout-ms: <decimal milliseconds>
//
// the time after which the node ends a stream that received no batch
// (gRPC status DEADLINE_EXCEEDED). A producer closes its idle streams
// (half-closes its side: the node answers what it took and ends the
// stream cleanly) well before that, so that a batch never races the
// node's idle close, which would leave the batch's messages "may be stored".
package producerv1

// IdleTimeoutMetadata is the response header (gRPC metadata) carrying the
// node's idle timeout of a Put stream, in decimal milliseconds.
const IdleTimeoutMetadata = "replicator-idle-timeout-ms"

// ALPNProtocol is the TLS application protocol (ALPN) id under which a
// node serves the producer stream on gRPC's own HTTP/2 transport. A
// producer offers it before "h2": a node that knows it picks it, an older
// node picks "h2" (the stream is then served through its HTTP server).
// The frames on the wire are HTTP/2 either way.
const ALPNProtocol = "replicator-grpc"
