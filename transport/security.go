package transport

import (
	"crypto/tls"
	"net/netip"
)

// Security is what a host asks of a transport's connections besides the
// bytes: TLS, which peers may connect, how many at once and how fast the
// listening side writes. The zero value asks for nothing. A transport that
// can apply it implements Securer; the host passes it through that
// capability and never needs the transport's concrete type.
type Security struct {
	// ServerTLS, when set, makes Listen serve TLS (the master's side).
	ServerTLS *tls.Config
	// ClientTLS, when set, makes Dial speak TLS (the slave's side, and a
	// master's own dials).
	ClientTLS *tls.Config
	// Allow, when not empty, lists the networks a peer's address must be in
	// for Listen to keep the connection.
	Allow []netip.Prefix
	// AllowClientNames, when not empty, lists the client-certificate names
	// (common name or a DNS name) a TLS peer of Listen may present.
	AllowClientNames []string
	// MaxConns and MaxConnsPerIP bound the connections Listen keeps open at
	// once, in all and per peer address; 0 means no limit.
	MaxConns      int
	MaxConnsPerIP int
	// MaxTransferRate bounds, in bytes per second, what Listen's side
	// writes on each connection; 0 means no limit.
	MaxTransferRate int64
}

// Protected reports whether s asks for TLS or access control: a transport
// that cannot apply them must not run without them, so a host refuses to
// start with a transport that is not a Securer.
func (s Security) Protected() bool {
	return s.ServerTLS != nil || s.ClientTLS != nil || len(s.Allow) > 0 || len(s.AllowClientNames) > 0
}

// Limited reports whether s asks for connection or rate limits, which a
// host may leave to a transport that is not a Securer (with a log line).
func (s Security) Limited() bool {
	return s.MaxConns > 0 || s.MaxConnsPerIP > 0 || s.MaxTransferRate > 0
}

// Securer is an optional capability of a Transport, found with a type
// assertion (as store.AppenderFrom beside store.Log): Secure returns a
// transport of the same kind whose connections apply s, or an error that
// says which part of s it cannot apply or why s is invalid. The receiver is
// left as it was.
type Securer interface {
	Secure(s Security) (Transport, error)
}
