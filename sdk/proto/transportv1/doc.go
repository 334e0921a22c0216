// Package transportv1 is generated from transport.proto (protoc-gen-go,
// protoc-gen-go-grpc) by sdk/proto/gen.sh (`make proto`); never edit the
// .pb.go files by hand. It is private wire detail of the SDK: plugin authors
// use sdk/transportplugin.
package transportv1
