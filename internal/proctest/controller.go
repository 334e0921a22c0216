package proctest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// StartController starts `replicator controller` (an embedded etcd
// member) with data in dir on a free client port and waits until etcd
// answers /health. Its client URL is in p.API. It supervises groups with
// --election-delay 0 (the nodes' fence at half their lease TTL is the
// margin); extra flags follow the defaults and win.
func StartController(t testing.TB, bin, dir string, extra ...string) *Proc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		pp, err := FreeAddrs(1)
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--log-level", "info", "controller", "--data", dir, "--listen", pp[0], "--election-delay", "0s"}, extra...)
		p := Start(t, bin, "controller", args...)
		p.API = "http://" + pp[0]
		err = p.waitHealth("/health")
		if err == nil {
			return p
		}
		if attempt < 3 && p.lostPort(err) {
			t.Logf("proctest: %s lost a port to another test, starting it again: %v", p.Name, err)
			continue
		}
		t.Fatal(err)
	}
}

// StartNode starts `replicator node` of group with broker id brokerID,
// data in dir, following the controller at controllerURL, on free API and
// HA ports (p.API, p.HA), and waits until its API is ready (not until it
// has a role: see WaitRole). Defaults for tests: --lease-ttl 2s (etcd's
// shortest), 1MiB segments, a 100 ms reconnect delay; extra flags follow
// and win.
func StartNode(t testing.TB, bin, dir, controllerURL, group string, brokerID int64, extra ...string) *Proc {
	t.Helper()
	name := "node" + strconv.FormatInt(brokerID, 10)
	return startOnFreePorts(t, 2, func(pp []string) *Proc {
		args := []string{"--log-level", "info", "node", "--controller", controllerURL, "--group", group,
			"--broker-id", strconv.FormatInt(brokerID, 10), "--data", dir, "--listen", pp[0], "--ha-listen", pp[1],
			"--lease-ttl", "2s", "--segment-size", "1MiB", "--reconnect-delay", "100ms", "--metadata-interval", "1s"}
		p := Start(t, bin, name, append(args, extra...)...)
		p.API, p.HA = "http://"+pp[0], pp[1]
		return p
	})
}

// waitHealth polls p.API+path until it answers 200 (etcd's /health).
func (p *Proc) waitHealth(path string) error { return p.waitOK(path, "healthy") }

// lostPort reports whether err is p's exit on a port another process took.
func (p *Proc) lostPort(err error) bool {
	return errors.Is(err, errExited) && strings.Contains(p.ReadLog(), "address already in use")
}
