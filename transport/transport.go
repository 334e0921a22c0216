package transport

import (
	"context"
	"net"
)

// Transport carries the classic HA byte stream between a master and its
// slaves. Connections are plain byte streams (net.Conn); the framing on top of
// them belongs to this package (see doc.go), so every transport speaks the
// same bytes. Implementations: plugins/transport-tcp (real TCP, the default)
// and transport/memtransport (in memory, with fault injection, for tests).
type Transport interface {
	// Listen opens the master's HA listener on addr.
	Listen(addr string) (net.Listener, error)
	// Dial connects a slave to the master's HA address. It honours ctx's
	// deadline as the connect timeout.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}
