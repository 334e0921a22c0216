package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// netProxy is a toxiproxy TCP proxy embedded in the test, listening on a
// free loopback port and forwarding to a node's HA port.
type netProxy struct {
	t *testing.T
	p *toxiproxy.Proxy
	// Addr is where the slave connects instead of the master's HA port.
	Addr string
}

func newNetProxy(t *testing.T, upstream string) *netProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "ha", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &netProxy{t: t, p: p, Addr: p.Listen}
}

// add adds a toxic: typ is a toxiproxy toxic type, stream "upstream"
// (slave to master) or "downstream" (master to slave), attrs its JSON
// attributes.
func (np *netProxy) add(name, typ, stream, attrs string) {
	np.t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := np.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		np.t.Fatalf("toxiproxy: add %s: %v", js, err)
	}
}

// both adds the toxic in both directions, named name-up and name-down.
func (np *netProxy) both(name, typ, attrs string) {
	np.add(name+"-up", typ, "upstream", attrs)
	np.add(name+"-down", typ, "downstream", attrs)
}

// remove removes toxics by name; missing ones are an error.
func (np *netProxy) remove(names ...string) {
	np.t.Helper()
	for _, n := range names {
		if err := np.p.Toxics.RemoveToxic(context.Background(), n); err != nil {
			np.t.Fatalf("toxiproxy: remove %s: %v", n, err)
		}
	}
}

// removeBoth removes the two toxics added by both.
func (np *netProxy) removeBoth(name string) { np.remove(name+"-up", name+"-down") }

// disable closes the listener and every proxied connection (a hard
// partition: connections are reset, new ones refused); enable listens
// again on the same address.
func (np *netProxy) disable() { np.p.Stop() }

func (np *netProxy) enable() {
	np.t.Helper()
	if err := np.p.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		np.t.Fatalf("toxiproxy: restart on %s: %v", np.Addr, err)
	}
}
