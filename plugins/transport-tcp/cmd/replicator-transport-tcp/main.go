// Command replicator-transport-tcp serves the builtin TCP transport
// (plugins/transport-tcp) as an external transport plugin. It is control
// only: the plugin listens, accepts and dials with RocketMQ's socket
// settings, then hands each connected socket to the host as a file
// descriptor; the host reads and writes every replicated byte itself.
//
//	go build -o bin/plugins/replicator-transport-tcp ./plugins/transport-tcp/cmd/replicator-transport-tcp
//
// TLS is not offered here: a TLS session's state lives in the process that
// runs the handshake, so its socket cannot be handed over. TLS stays in the
// host's builtin tcp transport.
//
// OpenRequest.Options understood: connect_timeout and keepalive (Go
// durations), no_delay (bool, default true), send_buffer and receive_buffer
// (bytes, 0 = the OS default), allow (comma-separated IP addresses and CIDR
// prefixes a peer must belong to: connection policy applied at accept, in
// the plugin). Connection limits (tcptransport's MaxConns, MaxConnsPerIP)
// are not offered: they count connections until they close, and a
// connection handed to the host is closed in the plugin at once.
package main

import (
	"github.com/replicatorhq/replicator/sdk/transportplugin"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() { transportplugin.Serve("tcp", version, open) }
