package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
)

var httpClient = &http.Client{Timeout: 10 * time.Second}

// getJSON decodes the JSON answer of GET url into v.
func getJSON(url string, v any) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// startNode runs `replicator ARGS...` and waits until its API at apiAddr
// answers /readyz.
func startNode(t *testing.T, label, apiAddr string, args ...string) *proc {
	t.Helper()
	p := startProc(t, label, nil, "", replicatorBin(t), append([]string{"--log-level", "info"}, args...)...)
	eventually(t, label+" ready", func() error {
		if done, err := p.exited(); done {
			t.Fatalf("%s exited early: %v", label, err)
		}
		resp, err := httpClient.Get("http://" + apiAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %d", resp.StatusCode)
		}
		return nil
	})
	return p
}

// status returns a node's GET /v1/status.
func status(t *testing.T, apiAddr string) api.Status {
	t.Helper()
	var st api.Status
	if err := getJSON("http://"+apiAddr+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// replicatorPut runs `replicator put` with one message per line of lines
// [from, from+n): line k is "m<k>-" padded with 'x' to 1 + k*2477 % 8000 bytes.
func replicatorPut(t *testing.T, apiAddr string, from, n int) {
	t.Helper()
	var in strings.Builder
	for k := from; k < from+n; k++ {
		line := fmt.Sprintf("m%d-", k)
		if pad := 1 + k*2477%8000 - len(line); pad > 0 {
			line += strings.Repeat("x", pad)
		}
		in.WriteString(line + "\n")
	}
	p := startProc(t, fmt.Sprintf("put-%d", from), nil, "", replicatorBin(t), "put", "--api", "http://"+apiAddr, "--topic", "TopicTest", "--tag", "TagA")
	io.WriteString(p.stdin, in.String())
	p.stdin.Close()
	if err := p.wait(); err != nil {
		t.Fatalf("replicator put: %v", err)
	}
}

// testDaemonMasterToJavaSlave: `replicator master`, fed by `replicator
// put`, replicates to the Java slave: 4.x start rule, appends during
// catch-up, byte-identical files, the Java slave's acks in the master's
// status.
func testDaemonMasterToJavaSlave(t *testing.T, classes string) {
	addrs := freeAddrs(t, 2)
	dir := t.TempDir()
	seg := strconv.Itoa(segSize)
	startNode(t, "master", addrs[0], "master", "--data", dir, "--listen", addrs[0], "--ha-listen", addrs[1], "--segment-size", seg)
	replicatorPut(t, addrs[0], 0, 200)
	st := status(t, addrs[0])
	start := st.MaxOffset - st.MaxOffset%segSize
	if start < 2*segSize {
		t.Fatalf("setup: master log of %d bytes spans too few segments", st.MaxOffset)
	}
	sdir := t.TempDir()
	js := startJava(t, classes, "java-slave", "HaSlave", addrs[1], sdir, seg, "--split", "3")
	js.waitLine(`^frame `) // the start offset is chosen
	replicatorPut(t, addrs[0], 200, 120)
	var max int64
	eventually(t, "the Java slave acks the master's max offset", func() error {
		st := status(t, addrs[0])
		max = st.MaxOffset
		if len(st.Slaves) != 1 || st.Slaves[0].AckOffset != max || st.Slaves[0].RequestOffset != 0 {
			return fmt.Errorf("max %d, slaves %+v", max, st.Slaves)
		}
		return nil
	})
	if first := checkFrames(t, js); first != start {
		t.Errorf("first frame at %d, want %d", first, start)
	}
	if err := sameLog(sdir, filepath.Join(dir, "commitlog"), segSize, start, max); err != nil {
		t.Fatal(err)
	}
	js.noErrors()
}

// testJavaMasterToDaemonSlave: the Java master feeds `replicator slave`;
// the slave's files are byte-identical to the Java master's and its API
// decodes the Java-encoded records.
func testJavaMasterToDaemonSlave(t *testing.T, classes string) {
	const maxBody = 4000
	jm := startJavaMaster(t, classes)
	max1 := jm.appendMessages(200, maxBody)
	start := max1 - max1%segSize
	addrs := freeAddrs(t, 2) // the slave's API; an address nobody serves as the master's API
	dir := t.TempDir()
	startNode(t, "slave", addrs[0], "slave", "--data", dir, "--listen", addrs[0], "--master", jm.addr,
		"--master-api", "http://"+addrs[1], "--segment-size", strconv.Itoa(segSize), "--reconnect-delay", "100ms", "--metadata-interval", "1h")
	jm.waitLine(fmt.Sprintf(`^start %d 0$`, start))
	max2 := jm.appendMessages(200, maxBody)
	eventually(t, "replicator slave catches up", func() error {
		if st := status(t, addrs[0]); st.MaxOffset != max2 || st.MinOffset != start {
			return fmt.Errorf("slave [%d, %d), Java master [%d, %d)", st.MinOffset, st.MaxOffset, start, max2)
		}
		return nil
	})
	if err := sameLog(filepath.Join(dir, "commitlog"), jm.dir, segSize, start, max2); err != nil {
		t.Fatal(err)
	}
	var msgs api.Messages
	if err := getJSON(fmt.Sprintf("http://%s/v1/messages?offset=%d&max=5", addrs[0], start), &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs.Messages) != 5 {
		t.Fatalf("GET /v1/messages from %d: %d messages", start, len(msgs.Messages))
	}
	for _, m := range msgs.Messages {
		n, err := strconv.Atoi(strings.TrimPrefix(m.Keys, "k"))
		if err != nil || m.Topic != "TopicTest" || m.QueueID != int32(n%4) || len(m.Body) != 1+n*7919%maxBody {
			t.Errorf("message at %d: topic %q keys %q queue %d body %d bytes", m.Offset, m.Topic, m.Keys, m.QueueID, len(m.Body))
		}
	}
	jm.noErrors()
}
