package tcptransport

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/transport"
)

// TestFlowBucketPacesWrites: with a fake clock, sending n bytes at rate r
// sleeps (n - burst) / r in all, in steps, never less.
func TestFlowBucketPacesWrites(t *testing.T) {
	clk := &fakeNow{t: time.Unix(0, 0)}
	var slept time.Duration
	f := newFlowBucket(1<<20, clk.now, func(d time.Duration) { slept += d; clk.add(d) })
	burst := int(f.burst) // a tenth of a second's worth, at least one chunk
	if burst != (1<<20)/10 {
		t.Fatalf("burst %d, want %d", burst, (1<<20)/10)
	}
	total := 0
	for total < 4<<20 {
		f.take(flowChunk)
		total += flowChunk
	}
	want := time.Duration(float64(total-burst) / float64(1<<20) * float64(time.Second))
	if slept < want-time.Millisecond || slept > want+time.Duration(total/flowChunk)*time.Millisecond {
		t.Fatalf("slept %v for %d bytes at 1 MiB/s, want about %v", slept, total, want)
	}
	// Idle time refills the bucket up to the burst, not more.
	slept = 0
	clk.add(time.Hour)
	f.take(flowChunk)
	if slept != 0 {
		t.Fatalf("slept %v after an idle hour", slept)
	}
	f.take(flowChunk)
	if slept == 0 {
		t.Fatal("an idle hour gave more than one burst")
	}
}

// TestThrottledConnDeliversEverything: a master side with MaxTransferRate
// sends every byte, in order, over real loopback TCP.
func TestThrottledConnDeliversEverything(t *testing.T) {
	o := DefaultOptions()
	o.MaxTransferRate = 64 << 20
	tr := New(o)
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := dialFrom(t, "127.0.0.1", ln.Addr().String())
	sc := acceptOne(t, ln)
	if _, ok := sc.(*throttledConn); !ok {
		t.Fatalf("accepted %T, want a throttled connection", sc)
	}
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	go func() {
		sc.Write(data)
		sc.Close()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("received %d bytes, not the %d sent", len(got), len(data))
	}
	if err := (Options{Security: transport.Security{MaxTransferRate: -1}}).Validate(); err == nil {
		t.Fatal("a negative MaxTransferRate validated")
	}
}
