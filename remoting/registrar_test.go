package remoting

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeNamesrv is a name server on in-memory pipes (inside a synctest
// bubble): it records every request with the (fake) time it arrived and
// answers as RouteInfoManager does for masterAddr, or with failWith.
type fakeNamesrv struct {
	mu       sync.Mutex
	reqs     []seenReq
	dials    int
	failDial error
	failWith int32  // answer this code instead of SUCCESS (0: none)
	master   string // masterAddr answered to broker ids other than 0
}

type seenReq struct {
	at   time.Time
	code int32
	ext  map[string]string
	body string
}

func (f *fakeNamesrv) dial(_ context.Context, _ string) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if f.failDial != nil {
		return nil, f.failDial
	}
	c, s := net.Pipe()
	go f.serve(s)
	return c, nil
}

func (f *fakeNamesrv) serve(c net.Conn) {
	defer c.Close()
	r := NewReader(c, 0)
	for {
		req, err := r.Read()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, seenReq{at: time.Now(), code: req.Code, ext: req.ExtFields, body: string(req.Body)})
		code, master := f.failWith, f.master
		f.mu.Unlock()
		resp := NewResponse(req, code, "")
		if code != Success {
			resp.Remark = "crc32 not match"
		} else if req.Code == RegisterBroker && req.ExtFields["brokerId"] != "0" && master != "" {
			resp.ExtFields = map[string]string{"masterAddr": master, "haServerAddr": "ha-of-" + master}
		}
		if err := WriteCommand(c, resp); err != nil {
			return
		}
	}
}

func (f *fakeNamesrv) seen() []seenReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenReq(nil), f.reqs...)
}

func (f *fakeNamesrv) set(fn func(f *fakeNamesrv)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// TestRegistrarSchedule: a registration at start, then every interval;
// a role change registers at once with the new broker id and restarts the
// period; each request carries the topics and a matching bodyCrc32; a
// failing name server is logged and counted without stopping the other;
// Close unregisters from both.
func TestRegistrarSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns := map[string]*fakeNamesrv{"ns1:9876": {master: "10.0.0.1:10911"}, "ns2:9876": {}}
		var logs syncBuffer
		reg := prometheus.NewRegistry()
		var resMu sync.Mutex
		var results []string
		r, err := NewRegistrar(RegistrarConfig{
			Namesrvs: []string{"ns1:9876", "ns2:9876"},
			Dial:     func(ctx context.Context, addr string) (net.Conn, error) { return ns[addr].dial(ctx, addr) },
			Topics:   func(context.Context) ([]byte, error) { return []byte(testWrapper), nil },
			Interval: 30 * time.Second,
			OnResult: func(namesrv string, res RegisterResult) {
				resMu.Lock()
				defer resMu.Unlock()
				results = append(results, namesrv+" "+res.MasterAddr+" "+res.HAServerAddr)
			},
			Logger:     hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
			Registerer: reg,
		})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := r.Start(testReg); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		time.Sleep(10 * time.Second) // t0 + 40 s: a demote
		ns["ns2:9876"].set(func(f *fakeNamesrv) { f.failWith = SystemError })
		slaveReg := testReg
		slaveReg.BrokerID = 3
		r.Update(slaveReg)
		synctest.Wait()
		time.Sleep(30 * time.Second) // t0 + 70 s: the period restarted at the change
		synctest.Wait()
		ns["ns2:9876"].set(func(f *fakeNamesrv) { f.failWith = Success })
		if err := r.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		synctest.Wait()

		wantAt := []time.Duration{0, 30 * time.Second, 40 * time.Second, 70 * time.Second}
		wantID := []string{"0", "0", "3", "3"}
		for addr, f := range ns {
			seen := f.seen()
			if len(seen) != len(wantAt)+1 {
				t.Fatalf("%s saw %d requests, want %d: %+v", addr, len(seen), len(wantAt)+1, seen)
			}
			for i, s := range seen[:len(wantAt)] {
				if s.code != RegisterBroker || s.at.Sub(t0) != wantAt[i] || s.ext["brokerId"] != wantID[i] {
					t.Errorf("%s request %d: code %d at %v id %s, want 103 at %v id %s", addr, i, s.code, s.at.Sub(t0), s.ext["brokerId"], wantAt[i], wantID[i])
				}
				if !strings.Contains(s.body, `"topicConfigSerializeWrapper":`+testWrapper) {
					t.Errorf("%s request %d body %s", addr, i, s.body)
				}
				if crc := strconv.Itoa(int(BodyCRC32([]byte(s.body)))); s.ext["bodyCrc32"] != crc {
					t.Errorf("%s request %d bodyCrc32 %s, want %s", addr, i, s.ext["bodyCrc32"], crc)
				}
			}
			last := seen[len(wantAt)]
			if last.code != UnregisterBroker || last.ext["brokerId"] != "3" || last.at.Sub(t0) != 70*time.Second || last.body != "" {
				t.Errorf("%s last request %+v, want UNREGISTER_BROKER of id 3 at 70 s", addr, last)
			}
			if f.dials != 1 && addr == "ns1:9876" {
				t.Errorf("%s dialled %d times; the connection should be kept", addr, f.dials)
			}
		}
		if ok, bad := testutil.ToFloat64(r.metrics.registrations.WithLabelValues("ok")), testutil.ToFloat64(r.metrics.registrations.WithLabelValues("error")); ok != 6 || bad != 2 {
			t.Errorf("registrations ok %v error %v, want 6 and 2", ok, bad)
		}
		if ok := testutil.ToFloat64(r.metrics.unregistrations.WithLabelValues("ok")); ok != 2 {
			t.Errorf("unregistrations ok %v, want 2", ok)
		}
		if g := testutil.ToFloat64(r.metrics.registered); g != 0 {
			t.Errorf("registered gauge %v after Close, want 0", g)
		}
		if !strings.Contains(logs.String(), "name server register failed") || !strings.Contains(logs.String(), "namesrv=ns2:9876") || !strings.Contains(logs.String(), "crc32 not match") {
			t.Errorf("no WARN naming the name server and its error:\n%s", logs.String())
		}
		resMu.Lock()
		defer resMu.Unlock()
		// ns1 answers a master address to broker id 3 only.
		want := "ns1:9876 10.0.0.1:10911 ha-of-10.0.0.1:10911"
		n := 0
		for _, l := range results {
			if l == want {
				n++
			}
		}
		if n != 2 {
			t.Errorf("results %q: want %q twice", results, want)
		}
	})
}

// TestRegistrarFailures: a name server that cannot be dialled, or answers
// an address longer than the bound, is retried at the next round; nothing
// is fatal and Close still ends.
func TestRegistrarFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeNamesrv{failDial: errors.New("connection refused")}
		var logs syncBuffer
		r, err := NewRegistrar(RegistrarConfig{
			Namesrvs: []string{"ns:9876"},
			Dial:     f.dial,
			Topics:   func(context.Context) ([]byte, error) { return []byte(testWrapper), nil },
			Interval: 10 * time.Second,
			Logger:   hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
		})
		if err != nil {
			t.Fatal(err)
		}
		reg := testReg
		reg.BrokerID = 1
		if err := r.Start(reg); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !strings.Contains(logs.String(), "connection refused") || !strings.Contains(logs.String(), "namesrv=ns:9876") {
			t.Fatalf("no WARN for the dial failure:\n%s", logs.String())
		}
		f.set(func(f *fakeNamesrv) { f.failDial = nil; f.master = strings.Repeat("m", MaxNamesrvAddrLen+1) })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !strings.Contains(logs.String(), "an address of 256 bytes") {
			t.Fatalf("no WARN for the overlong address:\n%s", logs.String())
		}
		f.set(func(f *fakeNamesrv) { f.master = "10.0.0.1:10911" })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !strings.Contains(logs.String(), "master_addr=10.0.0.1:10911") {
			t.Fatalf("no master address logged:\n%s", logs.String())
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if f.dials != 2 {
			t.Errorf("%d dials, want 2 (a refused one, then one connection kept: a bad answer leaves it in step)", f.dials)
		}
		if ok, bad := testutil.ToFloat64(r.metrics.registrations.WithLabelValues("ok")), testutil.ToFloat64(r.metrics.registrations.WithLabelValues("error")); ok != 1 || bad != 2 {
			t.Errorf("registrations ok %v error %v, want 1 and 2", ok, bad)
		}
	})
}

// TestRegistrarTopicsError: a topic source that fails skips the round
// for every name server (counted, logged) and the next round registers.
func TestRegistrarTopicsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeNamesrv{}
		var calls int
		var logs syncBuffer
		r, err := NewRegistrar(RegistrarConfig{
			Namesrvs: []string{"ns:9876"},
			Dial:     f.dial,
			Topics: func(context.Context) ([]byte, error) {
				calls++
				if calls == 1 {
					return nil, fmt.Errorf("store closed")
				}
				return []byte(testWrapper), nil
			},
			Interval: 10 * time.Second,
			Logger:   hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(testReg); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if len(f.seen()) != 0 || !strings.Contains(logs.String(), "store closed") {
			t.Fatalf("first round: %d requests, logs:\n%s", len(f.seen()), logs.String())
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if len(f.seen()) != 1 {
			t.Fatalf("second round: %d requests", len(f.seen()))
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewRegistrarRejects(t *testing.T) {
	if _, err := NewRegistrar(RegistrarConfig{Topics: func(context.Context) ([]byte, error) { return nil, nil }}); err == nil {
		t.Error("no name server: accepted")
	}
	if _, err := NewRegistrar(RegistrarConfig{Namesrvs: []string{"a:1"}}); err == nil {
		t.Error("no topic source: accepted")
	}
	// Close without Start sends nothing and returns.
	r, err := NewRegistrar(RegistrarConfig{Namesrvs: []string{"a:1"}, Topics: func(context.Context) ([]byte, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(testReg); err == nil {
		t.Error("Start after Close: accepted")
	}
}
