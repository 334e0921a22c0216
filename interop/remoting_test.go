package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// TestJavaRemotingPeers runs replicator's metadata sync over RocketMQ
// remoting against the independent Java peers (java/RemotingMaster.java,
// java/RemotingSlave.java): `replicator slave --metadata-source remoting`
// following the Java master (5.x and 4.x flavours), and the Java slave
// reading `replicator master`'s --remoting-listen in both header
// serialisations.
func TestJavaRemotingPeers(t *testing.T) {
	classes := javaClasses(t)
	t.Run("JavaMasterToDaemonSlave", func(t *testing.T) { testJavaRemotingMasterToDaemonSlave(t, classes, false) })
	t.Run("JavaV4MasterToDaemonSlave", func(t *testing.T) { testJavaRemotingMasterToDaemonSlave(t, classes, true) })
	t.Run("DaemonMasterToJavaSlave", func(t *testing.T) { testDaemonRemotingMasterToJavaSlave(t, classes) })
}

// getDocument returns a node's metadata document, or an error (404 while
// it has none).
func getDocument(apiAddr, name string) (meta.Document, error) {
	resp, err := httpClient.Get("http://" + apiAddr + "/v1/metadata/" + name)
	if err != nil {
		return meta.Document{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return meta.Document{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return meta.Document{}, fmt.Errorf("GET %s: %d %s", name, resp.StatusCode, b)
	}
	v, body, err := metadata.DecodeDocument(b)
	return meta.Document{Name: name, Version: v, Body: body}, err
}

// docHas waits until the node's document name has version want (unless
// zero) and contains every fragment.
func docHas(t *testing.T, apiAddr, name string, want meta.DataVersion, fragments ...string) {
	t.Helper()
	eventually(t, name+" on the slave", func() error {
		d, err := getDocument(apiAddr, name)
		if err != nil {
			return err
		}
		if want != (meta.DataVersion{}) && d.Version != want {
			return fmt.Errorf("version %+v, want %+v", d.Version, want)
		}
		for _, f := range fragments {
			if !strings.Contains(string(d.Body), f) {
				return fmt.Errorf("no %s in %s", f, d.Body)
			}
		}
		return nil
	})
}

// testJavaRemotingMasterToDaemonSlave: the Java master answers with
// fastjson bodies (unquoted integer keys, 4.x consumer offsets without a
// DataVersion); the daemon slave stores them as RocketMQ's files, adopts
// the topics' and groups' DataVersions, takes a new topic, and takes a
// consumer offset that changed without any DataVersion change. The 4.x
// master answers 402 and 61 REQUEST_CODE_NOT_SUPPORTED, which the slave
// tolerates.
func testJavaRemotingMasterToDaemonSlave(t *testing.T, classes string, v4 bool) {
	args := []string{"0"}
	if v4 {
		args = append(args, "--v4")
	}
	jm := startJava(t, classes, "java-remoting-master", "RemotingMaster", args...)
	port := jm.waitLine(`^listening (\d+)$`)[1]
	addrs := freeAddrs(t, 2) // the slave's API; an HA address nobody serves
	dir := t.TempDir()
	startProc(t, "slave", nil, "", replicatorBin(t), "--log-level", "info", "slave", "--data", dir, "--listen", addrs[0],
		"--master", addrs[1], "--metadata-source", "remoting", "--master-remoting", "127.0.0.1:"+port,
		"--metadata-interval", "100ms", "--reconnect-delay", "100ms")

	docHas(t, addrs[0], metadata.TopicsName, meta.DataVersion{Timestamp: 1764576000001, Counter: 1},
		`"TopicTest":{"order":false,"perm":6,"readQueueNums":8`)
	docHas(t, addrs[0], metadata.ConsumerOffsetName, meta.DataVersion{}, `"TopicTest@GroupA":{"0":12,"1":7}`)
	docHas(t, addrs[0], metadata.DelayOffsetName, meta.DataVersion{}, `{"offsetTable":{"1":0,"2":17,"3":5}}`)
	docHas(t, addrs[0], metadata.SubscriptionGroupName, meta.DataVersion{Timestamp: 1764576000000, Counter: 3}, `"GroupA":{`)
	if v4 {
		for _, name := range []string{metadata.MessageRequestModeName, metadata.TimerMetricsName} {
			if _, err := getDocument(addrs[0], name); err == nil || !strings.Contains(err.Error(), "404") {
				t.Fatalf("%s from a 4.x master: %v, want 404", name, err)
			}
		}
	} else {
		docHas(t, addrs[0], metadata.MessageRequestModeName, meta.DataVersion{}, `"mode":"POP"`)
		docHas(t, addrs[0], metadata.TimerMetricsName, meta.DataVersion{Timestamp: 1764576000000, Counter: 5}, `"TopicTest":{"count":3,`)
	}

	jm.send("topic NewTopic")
	jm.waitLine(`^topics 2$`)
	docHas(t, addrs[0], metadata.TopicsName, meta.DataVersion{Timestamp: 1764576000002, Counter: 2}, `"NewTopic":{`, `"TopicTest":{`)
	jm.send("offset TopicTest@GroupA 0 99")
	jm.waitLine(`^offsets$`)
	docHas(t, addrs[0], metadata.ConsumerOffsetName, meta.DataVersion{}, `"TopicTest@GroupA":{"0":99,"1":7}`)

	// The slave spoke JSON headers (RocketMQ's default), six codes a round.
	for _, code := range []string{"21", "43", "45", "201", "402", "61"} {
		jm.waitLine(`^request ` + code + ` JSON \d+$`)
	}
	for _, l := range jm.output() {
		if strings.HasPrefix(l, "closed ") && l != "closed eof" {
			t.Fatalf("the Java master saw a bad connection: %s", l)
		}
	}
	jm.noErrors()
}

// testDaemonRemotingMasterToJavaSlave: documents PUT on `replicator
// master` reach the Java slave over --remoting-listen, readable as
// RocketMQ's wrappers read them, in JSON and ROCKETMQ headers.
func testDaemonRemotingMasterToJavaSlave(t *testing.T, classes string) {
	addrs := freeAddrs(t, 3)
	dir := t.TempDir()
	startNode(t, "master", addrs[0], "master", "--data", dir, "--listen", addrs[0], "--ha-listen", addrs[1], "--remoting-listen", addrs[2])
	put := func(name, body string) meta.DataVersion {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, "http://"+addrs[0]+"/v1/metadata/"+name, strings.NewReader(body))
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
	tv := put(metadata.TopicsName, `{"topicConfigTable":{"T1":{"topicName":"T1","readQueueNums":4,"writeQueueNums":2,"perm":6},"T2":{"topicName":"T2"}}}`)
	put(metadata.ConsumerOffsetName, `{"offsetTable":{"T1@G":{"0":42,"3":8}}}`)
	put(metadata.DelayOffsetName, `{"offsetTable":{"1":7,"18":0}}`)
	gv := put(metadata.SubscriptionGroupName, `{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":true}}}`)
	for _, ser := range []string{"json", "rocketmq"} {
		js := startJava(t, classes, "java-remoting-slave-"+ser, "RemotingSlave", addrs[2], "--serialize", ser)
		if err := js.wait(); err != nil {
			t.Fatalf("%s: %v\n%s", js.name, err, strings.Join(js.output(), "\n"))
		}
		js.noErrors()
		got := js.output()
		for _, want := range []string{
			fmt.Sprintf("version topics %d %d %d", tv.StateVersion, tv.Timestamp, tv.Counter),
			"topic T1 4 2 6",
			"topic T2 16 16 6", // RocketMQ's TopicConfig defaults for absent members
			"offset T1@G 0 42",
			"offset T1@G 3 8",
			"delay 1 7",
			"delay 18 0",
			fmt.Sprintf("version groups %d %d %d", gv.StateVersion, gv.Timestamp, gv.Counter),
			"group G",
			"version timers 0 0 0", // no timer metrics on the master: the empty document
			"unsupported 310",
			"done",
		} {
			if !slices.Contains(got, want) {
				t.Errorf("%s: no line %q in\n%s", js.name, want, strings.Join(got, "\n"))
			}
		}
	}
}
