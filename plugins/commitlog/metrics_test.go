package commitlog

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two logs on one registry share the series: the appends of both are
// counted, closing one keeps the other's metrics registered, and closing
// the last takes them off the registry.
func TestTwoLogsShareOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := testOptions(t, 8192)
	o.Registerer = reg
	a := mustOpen(t, t.TempDir(), o)
	b := mustOpen(t, t.TempDir(), o)
	if a.m != b.m {
		t.Fatal("the second log did not take the registered metrics")
	}
	ra, err := a.Append(context.Background(), testMsg("T", 0, 100, 1))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Append(context.Background(), testMsg("T", 0, 200, 1))
	if err != nil {
		t.Fatal(err)
	}
	count := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "replicator_commitlog_appended_bytes_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	if got, want := count(), float64(ra.Size+rb.Size); got != want {
		t.Fatalf("appended_bytes_total = %v, want %v (both logs)", got, want)
	}
	mustClose(t, a)
	if _, err := b.Append(context.Background(), testMsg("T", 0, 50, 2)); err != nil {
		t.Fatal(err)
	}
	if got := count(); got <= float64(ra.Size+rb.Size) {
		t.Fatalf("after closing one log: appended_bytes_total = %v, the open log's append is lost", got)
	}
	mustClose(t, b)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("after the last close: %d series registered, %v", n, err)
	}
	// A third log registers afresh.
	c := mustOpen(t, t.TempDir(), o)
	if c.m == a.m {
		t.Fatal("a log opened after the last close took the unregistered set")
	}
	mustClose(t, c)
}
