// Package testpki makes throwaway certificate authorities and certificates
// for tests: ECDSA P-256 keys, a self-signed CA, server and client leaves for
// loopback, as tls.Certificate values or PEM files in a test directory.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM form.
	PEM  []byte
	Pool *x509.CertPool
}

// NewCA returns a fresh self-signed CA named name, valid for an hour either
// side of now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	tmpl := template(name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage |= x509.KeyUsageCertSign
	key, der := sign(t, tmpl, nil, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: pool}
}

// template is a certificate named cn, with a fresh serial number, valid
// for an hour either side of now.
func template(cn string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

// sign makes a fresh key and a certificate of tmpl for it, signed by
// parent with parentKey (parent nil: self-signed), and returns the key and
// the certificate's DER.
func sign(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	TLS     tls.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Server issues a server certificate for 127.0.0.1, ::1 and "localhost"
// with common name cn.
func (ca *CA) Server(t testing.TB, cn string) Leaf {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageServerAuth, []string{"localhost"})
}

// Client issues a client certificate with common name cn and the DNS names
// dns.
func (ca *CA) Client(t testing.TB, cn string, dns ...string) Leaf {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageClientAuth, dns)
}

func (ca *CA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage, dns []string) Leaf {
	t.Helper()
	tmpl := template(cn)
	tmpl.ExtKeyUsage, tmpl.DNSNames = []x509.ExtKeyUsage{usage}, dns
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	key, der := sign(t, tmpl, ca.Cert, ca.Key)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Leaf{
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
}

// WriteCA writes the CA certificate to dir/name and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Write writes the certificate to dir/name.crt and the key to dir/name.key
// (mode 0600) and returns both paths.
func (l Leaf) Write(t testing.TB, dir, name string) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cert, l.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, l.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
