package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
)

// MinTLSVersion is the oldest TLS version a node speaks, on the API and the
// HA port.
const MinTLSVersion = tls.VersionTLS12

// ErrTLSFiles marks a certificate, key or CA file that cannot be used.
var ErrTLSFiles = errors.New("TLS files")

// ServerTLS loads a server certificate and key (PEM files) into a TLS
// configuration. With clientCA set, clients must present a certificate
// signed by one of the CAs in that PEM file.
func ServerTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: a server certificate needs both the certificate and the key file", ErrTLSFiles)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: loading %s and %s: %w", ErrTLSFiles, certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: MinTLSVersion}
	if clientCA != "" {
		pool, err := LoadCAs(clientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS builds a client TLS configuration: the servers are verified
// against the CAs in caFile ("" means the system roots), the client presents
// certFile/keyFile when both are set, and serverName overrides the name
// checked in the server's certificate ("" means the dialed host).
func ClientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: MinTLSVersion, ServerName: serverName}
	if caFile != "" {
		pool, err := LoadCAs(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both the certificate and the key file", ErrTLSFiles)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: loading %s and %s: %w", ErrTLSFiles, certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// LoadCAs reads a PEM file of one or more CA certificates.
func LoadCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLSFiles, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrTLSFiles, file)
	}
	return pool, nil
}

// MaxTokenBytes bounds an API token file.
const MaxTokenBytes = 4096

// ErrBadToken marks an unusable API token.
var ErrBadToken = errors.New("bad API token")

// ReadToken reads an API bearer token from file: the file's content with
// surrounding white space (a trailing newline) removed. It must be 16 to
// 4096 bytes of printable ASCII without spaces.
func ReadToken(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenBytes+2))
	if err != nil {
		return "", fmt.Errorf("%w: reading %s: %w", ErrBadToken, file, err)
	}
	tok, err := CheckToken(string(b))
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	return tok, nil
}

// MinTokenBytes is the shortest token accepted (16 random bytes, hex- or
// base64-encoded, are 22 characters or more).
const MinTokenBytes = 16

// CheckToken trims surrounding white space from tok and checks it as
// ReadToken does.
func CheckToken(tok string) (string, error) {
	tok = strings.TrimSpace(tok)
	switch {
	case len(tok) > MaxTokenBytes:
		return "", fmt.Errorf("%w: longer than %d bytes", ErrBadToken, MaxTokenBytes)
	case len(tok) < MinTokenBytes:
		return "", fmt.Errorf("%w: shorter than %d bytes (use e.g. `openssl rand -hex 32`)", ErrBadToken, MinTokenBytes)
	case strings.ContainsFunc(tok, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' }):
		return "", fmt.Errorf("%w: only printable ASCII without spaces", ErrBadToken)
	}
	return tok, nil
}

// TokenTransport adds "Authorization: Bearer <Token>" to every request
// it sends through Base (nil: http.DefaultTransport).
type TokenTransport struct {
	Token string
	Base  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *TokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.Token == "" {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.Token)
	return base.RoundTrip(r)
}

// APIClient returns an HTTP client for a node's API with the given client
// TLS configuration (nil: the defaults) and bearer token ("" : none).
func APIClient(tlsCfg *tls.Config, token string, timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tlsCfg != nil {
		tr.TLSClientConfig = tlsCfg
	}
	// HTTP/1.1 only: a refused client certificate then reads as the TLS
	// alert ("tls: certificate required") instead of HTTP/2's "client conn
	// could not be established", and the API has nothing to gain from h2.
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	var rt http.RoundTripper = tr
	if token != "" {
		rt = &TokenTransport{Token: token, Base: tr}
	}
	// Never follow a redirect: the token would go wherever it points.
	return &http.Client{Timeout: timeout, Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}
