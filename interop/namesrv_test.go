package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// TestJavaNameServer: a RocketMQ slave finds a replicator master through
// a name server, as in a RocketMQ deployment. `replicator master
// --namesrv-addr` registers with the independent Java name server
// (java/NameServer.java: RouteInfoManager's rules, checked bodyCrc32,
// RegisterBrokerBody read as the name server reads it) as broker id 0 of
// DefaultCluster/broker-a, its remoting address as brokerAddr and its HA
// address as haServerAddr; the Java "RocketMQ slave" (java/RemotingSlave.java
// --namesrv) registers as broker id 1, gets masterAddr and haServerAddr in
// the answer, and syncs the master's metadata from there: topics at
// masterAddr's port - 2 (the VIP channel), the other documents at
// masterAddr. A graceful stop of the master unregisters it.
func TestJavaNameServer(t *testing.T) {
	classes := javaClasses(t)
	ns := startJava(t, classes, "java-namesrv", "NameServer", "0")
	nsAddr := "127.0.0.1:" + ns.waitLine(`^listening (\d+)$`)[1]
	brokerAddr, vipAddr := vipPortPair(t)
	addrs := freeAddrs(t, 2) // API, HA
	m := startNode(t, "master", addrs[0], "master", "--data", t.TempDir(), "--listen", addrs[0], "--ha-listen", addrs[1],
		"--remoting-listen", vipAddr+","+brokerAddr, "--namesrv-addr", nsAddr+";", "--register-interval", "10s")

	// The registration at start: id 0, the remoting and HA addresses, the
	// master's topics with their DataVersion (nothing was PUT yet).
	reg := ns.waitLine(`^register DefaultCluster broker-a 0 (\S+) (\S+) 413 version (\d+) (\d+) (\d+) topics (\S*) master - ha -$`)
	if reg[1] != brokerAddr || reg[2] != addrs[1] {
		t.Fatalf("registered broker address %s, HA %s; want %s and %s", reg[1], reg[2], brokerAddr, addrs[1])
	}
	d, err := getDocument(addrs[0], metadata.TopicsName)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s %s %s", reg[3], reg[4], reg[5]); got != fmt.Sprintf("%d %d %d", d.Version.StateVersion, d.Version.Timestamp, d.Version.Counter) {
		t.Fatalf("registered topics version %s, the master's is %+v", got, d.Version)
	}
	for name := range topicNames(t, d.Body) {
		if !slices.Contains(strings.Split(reg[6], ","), name) {
			t.Errorf("topic %s of the master not registered (%s)", name, reg[6])
		}
	}

	tv := putMetadata(t, addrs[0], metadata.TopicsName, `{"topicConfigTable":{"T1":{"topicName":"T1","readQueueNums":4,"writeQueueNums":2,"perm":6}}}`)
	putMetadata(t, addrs[0], metadata.ConsumerOffsetName, `{"offsetTable":{"T1@G":{"0":42}}}`)
	gv := putMetadata(t, addrs[0], metadata.SubscriptionGroupName, `{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":true}}}`)

	js := startJava(t, classes, "java-slave-via-namesrv", "RemotingSlave", "--namesrv", nsAddr, "--broker-id", "1",
		"--self", "127.0.0.1:1", "--register-ms", "200")
	if err := js.wait(); err != nil {
		t.Fatalf("%s: %v\n%s", js.name, err, strings.Join(js.output(), "\n"))
	}
	js.noErrors()
	got := js.output()
	for _, want := range []string{
		"registered " + brokerAddr + " " + addrs[1],
		"vip " + vipAddr,
		fmt.Sprintf("version topics %d %d %d", tv.StateVersion, tv.Timestamp, tv.Counter),
		"topic T1 4 2 6",
		"offset T1@G 0 42",
		fmt.Sprintf("version groups %d %d %d", gv.StateVersion, gv.Timestamp, gv.Counter),
		"group G",
		"unsupported 310",
		"done",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("%s: no line %q in\n%s", js.name, want, strings.Join(got, "\n"))
		}
	}
	ns.waitLine(`^register DefaultCluster broker-a 1 127\.0\.0\.1:1 127\.0\.0\.1:2 401 version 0 0 0 topics  master ` + brokerAddr + ` ha ` + addrs[1] + `$`)

	if n := metricValue(t, addrs[0], `replicator_remoting_namesrv_registrations_total{outcome="ok"}`); n < 1 {
		t.Errorf("registrations ok = %v", n)
	}
	if n := metricValue(t, addrs[0], `replicator_remoting_namesrv_registered`); n != 1 {
		t.Errorf("registered = %v, want 1", n)
	}

	// A graceful stop unregisters: the group keeps only the slave.
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := m.wait(); err != nil {
		t.Fatalf("master exit: %v", err)
	}
	ns.waitLine(`^unregister DefaultCluster broker-a 0 ` + brokerAddr + ` group \{1=127\.0\.0\.1:1\}$`)
	ns.noErrors()
}

// vipPortPair returns two free 127.0.0.1 addresses P and P - 2: a
// broker's listenPort and its VIP channel.
func vipPortPair(t *testing.T) (broker, vip string) {
	t.Helper()
	for range 100 {
		l1, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p-2))
		l1.Close()
		if err == nil {
			l2.Close()
			return l1.Addr().String(), l2.Addr().String()
		}
	}
	t.Fatal("no free port pair P, P - 2")
	return "", ""
}

// putMetadata PUTs a metadata document on a master and returns its new
// DataVersion.
func putMetadata(t *testing.T, apiAddr, name, body string) meta.DataVersion {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+apiAddr+"/v1/metadata/"+name, strings.NewReader(body))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pr metadata.PutResponse
	if err := json.NewDecoder(resp.Body).Decode(&pr); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %d %v", name, resp.StatusCode, err)
	}
	return pr.Version
}

// topicNames returns the topic names of a topics.json body.
func topicNames(t *testing.T, body []byte) map[string]bool {
	t.Helper()
	var doc struct {
		TopicConfigTable map[string]json.RawMessage `json:"topicConfigTable"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("topics.json: %v", err)
	}
	out := map[string]bool{}
	for name := range doc.TopicConfigTable {
		out[name] = true
	}
	return out
}

// metricValue returns the value of the sample named exactly series (name
// and labels as /metrics prints them) on a node, or -1 when absent.
func metricValue(t *testing.T, apiAddr, series string) float64 {
	t.Helper()
	resp, err := httpClient.Get("http://" + apiAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}
