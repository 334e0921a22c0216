package client_test

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/node"
)

// metricValue is the sum over the labels of n's gauge or counter name.
func metricValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				v += m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// TestClosesIdleStream: the producer closes a stream idle for half the
// node's idle timeout (announced in the stream's headers) itself, so that
// no batch races the node's idle close; the node ends the stream cleanly and
// the next message goes through a new stream. The idle timer is fake.
func TestClosesIdleStream(t *testing.T) {
	master, _ := runNode(t, node.Config{Role: core.AsyncMaster, DataDir: t.TempDir(), HAListen: "127.0.0.1:0"})
	fire := make(chan time.Time)
	asked := make(chan time.Duration, 64)
	timer := func(d time.Duration) (<-chan time.Time, func() bool) {
		select {
		case asked <- d:
		default:
		}
		return fire, func() bool { return true }
	}
	p := dial(t, []string{master.URL()}, client.WithIdleTimeout(10*time.Minute), client.WithIdleTimer(timer))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	// The node ends streams idle for api.DefaultStreamIdleTimeout: the
	// producer waits half of that (less than its own 10 minutes) after
	// its last batch.
	half := api.DefaultStreamIdleTimeout / 2
	for armed := false; !armed; {
		select {
		case d := <-asked:
			if d > 10*time.Minute || d <= 0 {
				t.Fatalf("idle timer of %s", d)
			}
			if d <= half {
				if d < half-5*time.Second {
					t.Fatalf("idle timer of %s, want about %s", d, half)
				}
				armed = true
			}
		case <-ctx.Done():
			t.Fatalf("no idle timer within half the node's idle timeout (%s) was armed", half)
		}
	}
	if n := metricValue(t, master, "replicator_stream_active_streams"); n != 1 {
		t.Fatalf("%v streams open, want 1", n)
	}
	fire <- time.Now()
	waitStreamsEnded(t, master)
	if n := metricValue(t, master, "replicator_stream_errors_total"); n != 0 {
		t.Fatalf("the node counted %v stream errors: the stream must end cleanly, closed by the producer", n)
	}
	res, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte("b")})
	if err != nil {
		t.Fatalf("after the idle close: %v", err)
	}
	if res.Status != client.PutOK || res.Offset == 0 {
		t.Fatalf("second put: %+v", res)
	}
	if n := metricValue(t, master, "replicator_stream_messages_total"); n != 2 {
		t.Fatalf("%v messages answered, want 2", n)
	}
}

// TestIdleTimerCountsDirectSends: a Send that finds its stream idle sends
// its batch itself, without waking the writer that waits with the idle
// timer armed; when that timer fires, the writer arms it again from the
// batch instead of closing a stream that just sent one. The idle timer
// is fake.
func TestIdleTimerCountsDirectSends(t *testing.T) {
	master, _ := runNode(t, node.Config{Role: core.AsyncMaster, DataDir: t.TempDir(), HAListen: "127.0.0.1:0"})
	fire := make(chan time.Time)
	asked := make(chan time.Duration, 64)
	timer := func(d time.Duration) (<-chan time.Time, func() bool) {
		asked <- d
		return fire, func() bool { return true }
	}
	p := dial(t, []string{master.URL()}, client.WithIdleTimer(timer))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitArmed := func() {
		t.Helper()
		select {
		case <-asked:
		case <-ctx.Done():
			t.Fatal("no idle timer was armed")
		}
	}
	send := func(body string) {
		t.Helper()
		if _, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	send("a")
	waitArmed()
	for len(asked) > 0 { // re-armed on the node's idle timeout header
		<-asked
	}
	send("b") // from this goroutine: the writer still waits with its timer
	fire <- time.Now()
	waitArmed() // armed again, not closed
	if n := metricValue(t, master, "replicator_stream_active_streams"); n != 1 {
		t.Fatalf("%v streams open after the timer fired behind a batch, want 1", n)
	}
	fire <- time.Now()
	waitStreamsEnded(t, master)
	if n := metricValue(t, master, "replicator_stream_messages_total"); n != 2 {
		t.Fatalf("%v messages answered, want 2", n)
	}
}

// waitStreamsEnded waits until the node counts no open stream (the
// node's side of a stream the producer closed).
func waitStreamsEnded(t *testing.T, master *node.Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(t, master, "replicator_stream_active_streams") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle stream did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
