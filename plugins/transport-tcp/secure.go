package tcptransport

import (
	"fmt"

	"github.com/replicatorhq/replicator/transport"
)

var _ transport.Securer = (*Transport)(nil)

// Secure returns a transport with t's options and s as their Security (TLS
// on both sides, the allow lists, the connection and rate limits), after
// Options.Validate; t is left as it was. It is how a host that holds only a
// transport.Transport (the node, through its plugin registry) secures the
// builtin transport.
func (t *Transport) Secure(s transport.Security) (transport.Transport, error) {
	o := t.Options()
	o.Security = s
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("tcptransport: security options: %w", err)
	}
	return New(o), nil
}
