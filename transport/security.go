package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
)

// Security is what a host asks of a transport's connections besides the
// bytes: TLS, which peers may connect, how many at once and how fast the
// listening side writes. The zero value asks for nothing. It is defined
// once, here: a transport that can apply it implements Securer (the host
// passes it through that capability and never needs the transport's
// concrete type), and a transport's own options embed it (the builtin
// tcptransport.Options does).
type Security struct {
	// ServerTLS, when set, makes Listen serve TLS (the master's side): the
	// HA bytes flow unchanged inside it. It needs a certificate
	// (Certificates, GetCertificate or GetConfigForClient).
	ServerTLS *tls.Config
	// ClientTLS, when set, makes Dial speak TLS (the slave's side, and a
	// master's own dials); the handshake completes inside Dial. An empty
	// ServerName is filled in from the dialed host.
	ClientTLS *tls.Config
	// Allow, when not empty, lists the networks a peer's address must
	// belong to (a single address is a /32 or /128 prefix; IPv4-mapped IPv6
	// peers are matched as IPv4). Listen closes any other connection at
	// accept, before reading a byte or starting TLS. Empty allows every
	// peer, as RocketMQ does.
	Allow []netip.Prefix
	// AllowClientNames, when not empty, lists the client-certificate names
	// a TLS peer of Listen may present: its verified certificate's common
	// name or one of its DNS names must be in the list, else the handshake
	// fails. It needs ServerTLS with ClientAuth
	// tls.RequireAndVerifyClientCert.
	AllowClientNames []string
	// MaxConns bounds the connections Listen keeps open at once (TLS
	// handshakes in progress included); MaxConnsPerIP bounds them per peer
	// address. A connection over a limit is closed at accept. 0 means no
	// limit.
	MaxConns      int
	MaxConnsPerIP int
	// MaxTransferRate bounds, in bytes per second, what Listen's side
	// writes on each accepted connection (the master's frames to one slave;
	// RocketMQ 5 FlowMonitor, maxHaTransferByteInSecond with
	// haFlowControlEnable). It keeps catch-up slaves, each reading the old
	// log as fast as the master can send it, from taking the CPU, the disk
	// and the link from the put path; a live slave needs only the
	// producers' rate. 0 means no limit (RocketMQ's default).
	MaxTransferRate int64
}

// Validate reports the first field of s that no transport can apply: a
// ServerTLS without a certificate, a negative limit or rate, an invalid
// prefix in Allow, or AllowClientNames without verified client
// certificates.
func (s Security) Validate() error {
	if s.ServerTLS != nil && len(s.ServerTLS.Certificates) == 0 && s.ServerTLS.GetCertificate == nil && s.ServerTLS.GetConfigForClient == nil {
		return errors.New("transport: ServerTLS has no certificate")
	}
	if s.MaxConns < 0 || s.MaxConnsPerIP < 0 {
		return fmt.Errorf("transport: negative connection limit (MaxConns %d, MaxConnsPerIP %d)", s.MaxConns, s.MaxConnsPerIP)
	}
	if s.MaxTransferRate < 0 {
		return fmt.Errorf("transport: negative MaxTransferRate %d", s.MaxTransferRate)
	}
	for _, p := range s.Allow {
		if !p.IsValid() {
			return errors.New("transport: invalid prefix in Allow")
		}
	}
	if len(s.AllowClientNames) > 0 && (s.ServerTLS == nil || s.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert) {
		return errors.New("transport: AllowClientNames needs ServerTLS with ClientAuth RequireAndVerifyClientCert")
	}
	return nil
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
// says which part of s it cannot apply or why s is invalid (Validate). The
// receiver is left as it was.
type Securer interface {
	Secure(s Security) (Transport, error)
}
