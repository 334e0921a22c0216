// Package producerv1 is generated from producer.proto (protoc-gen-go, protoc-gen-go-grpc) by
// sdk/proto/gen.sh (`make proto`); never edit the .pb.go files by hand. It is
// the wire contract of a node's producer stream (internal/api serves it);
// Go producers use the client package.
package producerv1
