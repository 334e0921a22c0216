package main

import (
	"testing"

	"github.com/replicatorhq/replicator/core"
)

// TestNamesrvAddresses: the registered broker address is the listen
// address whose VIP channel (port - 2) is listened on too, else the first;
// the HA address takes the broker host when it listens on all interfaces;
// the slave's HA default is the --listen port + 1.
func TestNamesrvAddresses(t *testing.T) {
	for _, c := range []struct {
		listen []string
		want   string
	}{
		{[]string{"127.0.0.1:10909"}, "127.0.0.1:10909"},
		{[]string{"127.0.0.1:10909", "127.0.0.1:10911"}, "127.0.0.1:10911"},
		{[]string{"127.0.0.1:10911", "127.0.0.1:10909"}, "127.0.0.1:10911"},
		{[]string{"127.0.0.1:7000", "10.0.0.1:7002", "127.0.0.1:7002"}, "127.0.0.1:7002"},
		{[]string{"a:2", "a:1"}, "a:2"},
	} {
		if got := pickBrokerAddr(c.listen); got != c.want {
			t.Errorf("pickBrokerAddr(%q) = %s, want %s", c.listen, got, c.want)
		}
	}
	for _, c := range []struct{ ha, host, want string }{
		{"127.0.0.1:10912", "10.0.0.1", "127.0.0.1:10912"},
		{"0.0.0.0:10912", "10.0.0.1", "10.0.0.1:10912"},
		{":10912", "broker.example", "broker.example:10912"},
		{"[::]:10912", "::1", "[::1]:10912"},
	} {
		if got, err := haServerAddr(c.ha, c.host); err != nil || got != c.want {
			t.Errorf("haServerAddr(%s, %s) = %s, %v; want %s", c.ha, c.host, got, err, c.want)
		}
	}
	if _, err := haServerAddr("127.0.0.1:0", "h"); err == nil {
		t.Error("an HA port 0 was accepted")
	}
	if got := defaultSlaveHAListen("127.0.0.1:10921"); got != "127.0.0.1:10922" {
		t.Errorf("defaultSlaveHAListen = %s", got)
	}
	w := &namesrvWiring{cluster: "C", name: "B", brokerAddr: "h:10911", haAddr: "h:10912", id: 4}
	if r := w.registration(core.Slave); r.BrokerID != 4 || r.ClusterName != "C" || r.BrokerName != "B" || r.BrokerAddr != "h:10911" || r.HAServerAddr != "h:10912" {
		t.Errorf("slave registration %+v", r)
	}
	for _, role := range []core.Role{core.AsyncMaster, core.SyncMaster} {
		if r := w.registration(role); r.BrokerID != 0 {
			t.Errorf("%v registration with id %d, want 0", role, r.BrokerID)
		}
	}
}
