package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestProtocolsConfig: Protocols defaults to classic and refuses unknown
// names.
func TestProtocolsConfig(t *testing.T) {
	c := Config{Via: []string{ViaLibrary}}
	if err := c.defaults(); err != nil || len(c.Protocols) != 1 || c.Protocols[0] != ProtocolClassic {
		t.Fatalf("default protocols %v (%v)", c.Protocols, err)
	}
	c = Config{Via: []string{ViaLibrary}, Protocols: []string{ProtocolClassic, "raft"}}
	if err := c.defaults(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "raft") {
		t.Fatalf("unknown protocol: %v", err)
	}
}

// TestCompareProtocols: an autoswitch point is reported as its share of
// the same classic point's rate (msgs/s for loads, MB/s for catch-up), and
// results carry their protocol.
func TestCompareProtocols(t *testing.T) {
	var progress bytes.Buffer
	var got []Result
	r := &runner{cfg: Config{Protocols: []string{ProtocolClassic, ProtocolAutoSwitch}, Progress: &progress, Emit: func(res Result) { got = append(got, res) }}}
	r.protocol = ProtocolClassic
	r.emit(Result{Scenario: Sync, Via: ViaAPI, Store: StoreBuiltin, Producers: ptr(8), MsgsPerS: ptr(1000.0)})
	r.emit(Result{Scenario: Catchup, Via: ViaAPI, Store: StoreBuiltin, MBPerS: ptr(400.0)})
	r.protocol = ProtocolAutoSwitch
	r.emit(Result{Scenario: Sync, Via: ViaAPI, Store: StoreBuiltin, Producers: ptr(8), MsgsPerS: ptr(950.0)})
	r.emit(Result{Scenario: Catchup, Via: ViaAPI, Store: StoreBuiltin, MBPerS: ptr(300.0)})
	r.emit(Result{Scenario: Sync, Via: ViaLibrary, Store: StoreBuiltin, Producers: ptr(8), MsgsPerS: ptr(5.0)})
	out := progress.String()
	for _, want := range []string{
		"sync via api, builtin store, 8 producers: autoswitch 950 msgs/s = 0.950 of classic's 1000",
		"catchup via api, builtin store: autoswitch 300 MB/s = 0.750 of classic's 400",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
	protos := []string{}
	for _, res := range got {
		protos = append(protos, res.Protocol)
	}
	if strings.Join(protos, " ") != "classic classic autoswitch autoswitch classic" {
		t.Fatalf("protocols of the results: %v", protos)
	}
}
