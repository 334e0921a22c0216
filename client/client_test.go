package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/internal/testlog"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// runNode runs a node in this process on real loopback TCP and real files.
func runNode(t testing.TB, cfg node.Config) (*node.Node, func()) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.Registry, cfg.SegmentSize, cfg.Version = pluginhost.Builtin(), 4<<20, "test"
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: fmt.Sprintf("node%d", cfg.BrokerID), Level: hclog.Debug, Output: testlog.OnFailure(t)})
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-n.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("node did not start: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	}
	t.Cleanup(stop)
	return n, stop
}

var hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}

func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// pair runs a sync master and its slave; the slave knows the master's API.
func pair(t testing.TB) (master, slave *node.Node) {
	t.Helper()
	dir := t.TempDir()
	master, _ = runNode(t, node.Config{Role: core.SyncMaster, DataDir: filepath.Join(dir, "m"), HAListen: "127.0.0.1:0", SlaveTimeout: 3 * time.Second})
	var st api.Status
	getJSON(t, master.URL()+"/v1/status", &st)
	slave, _ = runNode(t, node.Config{Role: core.Slave, DataDir: filepath.Join(dir, "s"), MasterHA: st.HAAddr, MasterAPI: master.URL(), ReconnectDelay: 50 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for {
		getJSON(t, master.URL()+"/v1/status", &st)
		if len(st.Slaves) > 0 && st.Slaves[0].LastAckMsAgo >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slave did not connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(hc.CloseIdleConnections)
	return master, slave
}

func dial(t testing.TB, addrs []string, opts ...client.Option) *client.Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.Dial(ctx, addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// readBodies reads the whole log of a node: body -> offset.
func readBodies(t testing.TB, url string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var off int64
	for {
		var page api.Messages
		getJSON(t, url+"/v1/messages?max=1024&offset="+strconv.FormatInt(off, 10), &page)
		for _, m := range page.Messages {
			out[string(m.Body)] = m.Offset
		}
		if page.NextOffset >= page.MaxOffset || len(page.Messages) == 0 {
			return out
		}
		off = page.NextOffset
	}
}

// TestSyncPutsFromOneGoroutine: one goroutine keeps many sync puts in
// flight; every result matches the stored record, on the master and the
// slave.
func TestSyncPutsFromOneGoroutine(t *testing.T) {
	master, slave := pair(t)
	p := dial(t, []string{master.URL()})
	const n = 2000
	fs := make([]*client.Future, n)
	for i := range fs {
		fs[i] = p.SendAsync(&client.Message{Topic: "TopicTest", QueueID: int32(i % 4), Body: []byte(fmt.Sprintf("msg-%05d", i))})
	}
	want := map[string]int64{}
	var last int64
	for i, f := range fs {
		r, err := f.Result()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		// Every status means stored on the master (a slave ack slower than
		// the slave timeout on a loaded machine gives FLUSH_SLAVE_TIMEOUT).
		if r.NextOffset <= r.Offset || r.Node != master.Addr() {
			t.Fatalf("message %d: %+v", i, r)
		}
		want[fmt.Sprintf("msg-%05d", i)] = r.Offset
		last = max(last, r.NextOffset)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st api.Status
		getJSON(t, slave.URL()+"/v1/status", &st)
		if st.MaxOffset >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slave holds %d bytes, want %d", st.MaxOffset, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, url := range []string{master.URL(), slave.URL()} {
		got := readBodies(t, url)
		for b, off := range want {
			if got[b] != off {
				t.Fatalf("%s: %s at %d, want %d", url, b, got[b], off)
			}
		}
	}
}

func TestSendBatchInOrder(t *testing.T) {
	master, _ := pair(t)
	p := dial(t, []string{master.URL()}, client.WithMaxBatch(1<<20, 7))
	msgs := make([]*client.Message, 50)
	for i := range msgs {
		msgs[i] = &client.Message{Topic: "TopicTest", Body: []byte(strconv.Itoa(i))}
	}
	res, errs := p.SendBatch(context.Background(), msgs)
	got := readBodies(t, master.URL())
	for i := range msgs {
		if errs[i] != nil {
			t.Fatalf("message %d: %v", i, errs[i])
		}
		if got[strconv.Itoa(i)] != res[i].Offset {
			t.Fatalf("result %d says offset %d; the body is at %d", i, res[i].Offset, got[strconv.Itoa(i)])
		}
	}
}

// TestFollowsTheMaster: a producer that knows only the slave stores on the
// master the slave names.
func TestFollowsTheMaster(t *testing.T) {
	master, slave := pair(t)
	p := dial(t, []string{slave.URL()})
	r, err := p.Send(context.Background(), &client.Message{Topic: "TopicTest", Body: []byte("via the slave")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Node != master.Addr() || r.Status != client.PutOK {
		t.Fatalf("result %+v, want PUT_OK from the master %s", r, master.Addr())
	}
	if a := p.Addrs(); a[0] != master.Addr() {
		t.Fatalf("addresses %v: the master is not the target", a)
	}
	if _, ok := readBodies(t, master.URL())["via the slave"]; !ok {
		t.Fatal("the message is not on the master")
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestConnectionRefused: a dead address is skipped; with no node left the
// put fails as not stored once the retry timeout passes.
func TestConnectionRefused(t *testing.T) {
	dead := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, []string{dead}); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrNoListener) {
		t.Fatalf("Dial of a dead address: %v", err)
	}
	if _, err := client.Dial(ctx, []string{"ftp://x:1"}); err == nil {
		t.Fatal("Dial took an ftp:// address")
	}

	master, stop := runNode(t, node.Config{Role: core.AsyncMaster, DataDir: t.TempDir(), HAListen: "127.0.0.1:0"})
	p := dial(t, []string{dead, master.URL()}, client.WithRetryTimeout(300*time.Millisecond))
	if _, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	stop()
	_, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte("y")})
	if !errors.Is(err, client.ErrNotStored) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("with every node down: %v", err)
	}
}

func TestLocalChecks(t *testing.T) {
	master, _ := runNode(t, node.Config{Role: core.AsyncMaster, DataDir: t.TempDir(), HAListen: "127.0.0.1:0"})
	p := dial(t, []string{master.URL()}, client.WithMaxMessageBytes(10))
	_, err := p.Send(context.Background(), &client.Message{Topic: "T", Body: make([]byte, 11)})
	if !errors.Is(err, client.ErrTooLarge) || !errors.Is(err, client.ErrNotStored) {
		t.Fatalf("too large: %v", err)
	}
	if _, err := p.SendAsync(nil).Result(); !errors.Is(err, client.ErrInvalidMessage) {
		t.Fatalf("nil message: %v", err)
	}
	p.Close()
	if _, err := p.Send(context.Background(), &client.Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestStatusString: the statuses print as RocketMQ's PutMessageStatus
// names (the producer stream's enum), anything else as UNKNOWN.
func TestStatusString(t *testing.T) {
	for s, want := range map[client.Status]string{
		client.PutOK:             "PUT_OK",
		client.FlushDiskTimeout:  "FLUSH_DISK_TIMEOUT",
		client.FlushSlaveTimeout: "FLUSH_SLAVE_TIMEOUT",
		client.SlaveNotAvailable: "SLAVE_NOT_AVAILABLE",
		client.Status(-1):        "UNKNOWN",
		client.Status(4):         "UNKNOWN",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}
