package transport

import (
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"
)

// TestSecurityValidate: every rule of Security.Validate refuses its case
// with a message naming the field, and the zero value and a complete valid
// value pass.
func TestSecurityValidate(t *testing.T) {
	cert := []tls.Certificate{{}}
	mutual := &tls.Config{Certificates: cert, ClientAuth: tls.RequireAndVerifyClientCert}
	for _, tc := range []struct {
		s    Security
		want string // "" = valid
	}{
		{Security{}, ""},
		{Security{ServerTLS: mutual, ClientTLS: &tls.Config{}, Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			AllowClientNames: []string{"slave-1"}, MaxConns: 4, MaxConnsPerIP: 2, MaxTransferRate: 1 << 20}, ""},
		{Security{ServerTLS: &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil }}}, ""},
		{Security{ServerTLS: &tls.Config{}}, "ServerTLS has no certificate"},
		{Security{MaxConns: -1}, "MaxConns -1"},
		{Security{MaxConnsPerIP: -1}, "MaxConnsPerIP -1"},
		{Security{MaxTransferRate: -1}, "MaxTransferRate -1"},
		{Security{Allow: []netip.Prefix{{}}}, "invalid prefix in Allow"},
		{Security{AllowClientNames: []string{"x"}}, "AllowClientNames needs"},
		{Security{AllowClientNames: []string{"x"}, ServerTLS: &tls.Config{Certificates: cert}}, "AllowClientNames needs"},
	} {
		err := tc.s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(%+v) = %v, want nil", tc.s, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(%+v) = %v, want an error with %q", tc.s, err, tc.want)
		}
	}
}

// TestSecurityProtectedLimited: TLS and the allow lists make a Security
// protected, the limits make it limited, and neither is the other.
func TestSecurityProtectedLimited(t *testing.T) {
	for _, tc := range []struct {
		s                  Security
		protected, limited bool
	}{
		{Security{}, false, false},
		{Security{ServerTLS: &tls.Config{}}, true, false},
		{Security{ClientTLS: &tls.Config{}}, true, false},
		{Security{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, true, false},
		{Security{AllowClientNames: []string{"a"}}, true, false},
		{Security{MaxConns: 1}, false, true},
		{Security{MaxConnsPerIP: 1}, false, true},
		{Security{MaxTransferRate: 1}, false, true},
	} {
		if p, l := tc.s.Protected(), tc.s.Limited(); p != tc.protected || l != tc.limited {
			t.Errorf("%+v: Protected %v Limited %v, want %v %v", tc.s, p, l, tc.protected, tc.limited)
		}
	}
}
