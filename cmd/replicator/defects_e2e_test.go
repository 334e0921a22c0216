package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
)

// TestE2EStatusWaits: the --wait-* options of status let a script start
// nodes in the background and go on without sleeping: --wait-ready
// returns once the master serves, --wait-following once the slave follows
// it, --wait-caught-up once the slave holds what the master had; a wait
// that cannot succeed gives up after --timeout with exit 1 and says why.
func TestE2EStatusWaits(t *testing.T) {
	t.Parallel()
	pp := ports(t, 3)
	m := start(t, "master", "master", "--data", filepath.Join(t.TempDir(), "m"), "--listen", pp[0], "--ha-listen", pp[1], "--segment-size", testSegment)
	m.api, m.ha = "http://"+pp[0], pp[1]
	// No wait before this: the master may not listen yet.
	code, out, errOut := runCLI(t, "", "status", "--api", m.api, "--wait-ready", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "ASYNC_MASTER") {
		t.Fatalf("status --wait-ready: exit %d\n%s%s", code, out, errOut)
	}
	s := start(t, "slave", "slave", "--data", filepath.Join(t.TempDir(), "s"), "--listen", pp[2], "--master", m.ha,
		"--master-api", m.api, "--segment-size", testSegment, "--reconnect-delay", "100ms")
	s.api = "http://" + pp[2]
	if code, out, errOut := runCLI(t, "", "status", "--api", s.api, "--wait-following", "--timeout", "60s"); code != 0 || !strings.Contains(out, "connected") {
		t.Fatalf("status --wait-following: exit %d\n%s%s", code, out, errOut)
	}
	for i := range 20 {
		put(t, m.api, "T", fmt.Sprintf("message %d", i))
	}
	want := status(t, m.api).MaxOffset
	if code, out, errOut := runCLI(t, "", "status", "--api", s.api, "--wait-caught-up", m.api, "--timeout", "60s", "--json"); code != 0 {
		t.Fatalf("status --wait-caught-up: exit %d\n%s%s", code, out, errOut)
	}
	if got := status(t, s.api).MaxOffset; got < want {
		t.Fatalf("after --wait-caught-up the slave is at %d, the master was at %d", got, want)
	}
	if code, _, errOut := runCLI(t, "", "status", "--api", s.api, "--wait-offset", fmt.Sprint(want)); code != 0 {
		t.Fatalf("status --wait-offset %d: exit %d %s", want, code, errOut)
	}
	// Conditions that do not come true: exit 1 after --timeout, with the reason.
	startWait := time.Now()
	code, _, errOut = runCLI(t, "", "status", "--api", s.api, "--wait-offset", fmt.Sprint(want+1<<30), "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "gave up") || !strings.Contains(errOut, "waiting for") {
		t.Fatalf("unreachable offset: exit %d %q", code, errOut)
	}
	if d := time.Since(startWait); d > 20*time.Second {
		t.Fatalf("gave up after %v", d)
	}
	m.stop()
	code, _, errOut = runCLI(t, "", "status", "--api", s.api, "--wait-following", "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "not following") {
		t.Fatalf("following a stopped master: exit %d %q", code, errOut)
	}
	s.stop()
}

// TestE2ESlaveReadyzFollowing: after kill -9 of the master the slave keeps
// serving reads (/readyz 200) but /readyz?following answers 503, and 200
// again once a master is back.
func TestE2ESlaveReadyzFollowing(t *testing.T) {
	t.Parallel()
	m := startMaster(t, t.TempDir())
	s := startSlave(t, t.TempDir(), m)
	get := func(path string) (int, string) {
		code, b := httpDo(t, "GET", s.api+path, nil, nil)
		return code, string(b)
	}
	eventually(t, "slave following", func() error {
		if code, b := get("/readyz?following"); code != 200 || !strings.Contains(b, `"following"`) {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	m.signal(syscall.SIGKILL)
	<-m.done
	eventually(t, "slave not following", func() error {
		if code, b := get("/readyz?following"); code != 503 || !strings.Contains(b, `"not following"`) {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	if code, b := get("/readyz"); code != 200 {
		t.Fatalf("plain /readyz of a slave without master: %d %s", code, b)
	}
	m.restart()
	eventually(t, "slave following again", func() error {
		if code, b := get("/readyz?following"); code != 200 {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	s.stop()
	m.stop()
}

// TestE2EExitCodesOfBadValues: an unusable value found after parsing (a
// token file too short) exits 2 like one found while parsing (a missing
// file), for nodes and client commands alike.
func TestE2EExitCodesOfBadValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	pp := ports(t, 2)
	for _, args := range [][]string{
		{"master", "--data", filepath.Join(dir, "m"), "--listen", pp[0], "--ha-listen", pp[1], "--api-token-file", short},
		{"master", "--data", filepath.Join(dir, "m"), "--listen", pp[0], "--ha-listen", pp[1], "--api-token-file", missing},
		{"status", "--api", "http://" + pp[0], "--token-file", short},
		{"status", "--api", "http://" + pp[0], "--token-file", missing},
		{"put", "--api", "http://" + pp[0], "--token-file", short, "x"},
		{"master", "--data", filepath.Join(dir, "m"), "--listen", pp[0], "--ha-listen", pp[1], "--segment-size", "1MiB", "--max-message-size", "1MiB"},
	} {
		code, _, errOut := runCLI(t, "", args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, strings.TrimSpace(errOut))
		}
	}
}

// TestE2EMaxMessageSizeIsTheBody: --max-message-size bounds the body, as
// documented: a body of exactly that size with a long topic and properties
// is stored; one byte more answers 413 naming the body.
func TestE2EMaxMessageSizeIsTheBody(t *testing.T) {
	t.Parallel()
	m := startMaster(t, t.TempDir(), "--max-message-size", "64KiB")
	topic := strings.Repeat("t", 127)
	h := http.Header{api.PropertyHeader: {"k=" + strings.Repeat("v", 1000)}}
	code, b := httpDo(t, "POST", m.api+"/v1/topics/"+topic+"/messages", h, bytes.Repeat([]byte("b"), 64<<10))
	if code != 200 {
		t.Fatalf("a body of --max-message-size: %d %s", code, b)
	}
	code, b = httpDo(t, "POST", m.api+"/v1/topics/"+topic+"/messages", h, bytes.Repeat([]byte("b"), 64<<10+1))
	if code != 413 || !strings.Contains(string(b), "body") {
		t.Fatalf("one byte more: %d %s", code, b)
	}
	m.stop()
}

// TestE2EMetadataLimitsAndDelete: the metadata store is bounded (count and
// total size: 507 with a JSON message, counted), a document can be deleted
// on the master (DELETE), the deletion reaches the slave, and other
// methods answer a JSON 405.
func TestE2EMetadataLimitsAndDelete(t *testing.T) {
	t.Parallel()
	m := startMaster(t, t.TempDir(), "--metadata-max-documents", "6", "--metadata-max-total-size", "64KiB")
	s := startSlave(t, t.TempDir(), m, "--metadata-interval", "100ms")
	doc := func(base, method, name, body string) (int, string) {
		var rd []byte
		if body != "" {
			rd = []byte(body)
		}
		code, b := httpDo(t, method, base+"/v1/metadata/"+name, nil, rd)
		return code, string(b)
	}
	for _, n := range []string{"a.json", "b.json"} {
		if code, b := doc(m.api, "PUT", n, `{"k":1}`); code != 200 {
			t.Fatalf("PUT %s: %d %s", n, code, b)
		}
	}
	code, b := doc(m.api, "PUT", "c.json", `{"k":1}`)
	var ea api.ErrorAnswer
	if code != 507 || json.Unmarshal([]byte(b), &ea) != nil || !strings.Contains(ea.Error, "limit") {
		t.Fatalf("a 7th document: %d %s, want 507", code, b)
	}
	if code, b := doc(m.api, "PUT", "a.json", `{"k":"`+strings.Repeat("x", 70<<10)+`"}`); code != 507 && code != 413 {
		t.Fatalf("over the total size: %d %.200s", code, b)
	}
	eventually(t, "slave has b.json", func() error {
		if code, b := doc(s.api, "GET", "b.json", ""); code != 200 {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	if code, b := doc(s.api, "DELETE", "b.json", ""); code != 403 {
		t.Fatalf("DELETE on the slave: %d %s", code, b)
	}
	if code, b := doc(m.api, "DELETE", "b.json", ""); code != 200 || !strings.Contains(b, `"deleted":true`) {
		t.Fatalf("DELETE on the master: %d %s", code, b)
	}
	eventually(t, "slave deleted b.json", func() error {
		if code, b := doc(s.api, "GET", "b.json", ""); code != 404 {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	if code, b := doc(m.api, "PUT", "c.json", `{"k":1}`); code != 200 {
		t.Fatalf("PUT after a delete made room: %d %s", code, b)
	}
	code, b = doc(m.api, "POST", "x", `{}`)
	if code != 405 || json.Unmarshal([]byte(b), &ea) != nil || ea.Error == "" {
		t.Fatalf("POST /v1/metadata/x: %d %s, want a JSON 405", code, b)
	}
	c := newClient(m.api, 10*time.Second)
	defer c.hc.CloseIdleConnections()
	_, metrics, err := c.getRaw(t.Context(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`replicator_metadata_refused_writes_total{reason="documents"} 1`, "replicator_metadata_documents 6"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("master metrics lack %q", want)
		}
	}
	s.stop()
	m.stop()
}

// TestStatusShowsOutOfRangeSlaves: an out-of-range slave is a row with its
// state, not a negative lag.
func TestStatusShowsOutOfRangeSlaves(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, "http://m", api.Status{Role: "ASYNC_MASTER", Slaves: []api.SlaveStatus{
		{Addr: "10.0.0.2:4000", AckOffset: 200000, LagBytes: -159846, LastAckMsAgo: 10, RequestOffset: 200000, OutOfRange: true},
		{Addr: "10.0.0.3:4000", AckOffset: 100, LagBytes: 40, LastAckMsAgo: 10, RequestOffset: 0},
	}})
	out := b.String()
	if strings.Contains(out, "-156") || !strings.Contains(out, "out of range (asked for 200000)") || !strings.Contains(out, "replicating") {
		t.Fatalf("status table:\n%s", out)
	}
}

// TestStatusShowsDivergedSlave: a classic slave that found its master's
// log ending below its own says so in the text status, not only in JSON.
func TestStatusShowsDivergedSlave(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, "http://s", api.Status{Role: "SLAVE", Master: &api.MasterLink{Addr: "127.0.0.1:10912", Connected: true,
		Diverged: "the master's log ends at 500, this slave's at 2000: it is longer or diverged"}})
	if out := b.String(); !strings.Contains(out, "DIVERGED") || !strings.Contains(out, "ends at 500") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestTailHelpPrintsOneDefault: a flag's help states its default once.
func TestTailHelpPrintsOneDefault(t *testing.T) {
	code, out, _ := runCLI(t, "", "tail", "--help")
	if code != 0 {
		t.Fatalf("tail --help: exit %d", code)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Count(line, "default") > 1 {
			t.Errorf("two defaults: %q", line)
		}
	}
}

// TestE2EAPIConnectionFlags: --api-max-conns-per-ip reaches the API's
// listener: idle keep-alive connections from one address beyond it are
// closed for newcomers (counted), and a client from another address is
// served.
func TestE2EAPIConnectionFlags(t *testing.T) {
	t.Parallel()
	m := startMaster(t, t.TempDir(), "--api-max-conns-per-ip", "3", "--api-idle-timeout", "1m")
	addr := strings.TrimPrefix(m.api, "http://")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 10 {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("cannot connect from 127.0.0.2: %v", err)
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("keep-alive request: %v", err)
		}
		resp.Body.Close()
	}
	st := status(t, m.api) // from 127.0.0.1
	if st.Role == "" {
		t.Fatal("no status")
	}
	c := newClient(m.api, 10*time.Second)
	defer c.hc.CloseIdleConnections()
	_, metrics, err := c.getRaw(t.Context(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var evicted float64
	for _, line := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(line, "replicator_http_evicted_connections_total "); ok {
			fmt.Sscan(v, &evicted)
		}
	}
	if evicted < 7 {
		t.Fatalf("evicted %v idle connections of 10 from one address with a cap of 3, want at least 7", evicted)
	}
	m.stop()
}
