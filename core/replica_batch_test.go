package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/sdk/record"
)

// TestReplicaPutBatchRoles: PutBatch follows Put's role rules for every
// message: no role → ErrNotMaster, slave → ErrNotMaster wrapping
// ErrSlaveWriteProtected (nothing stored), master → the master's batch
// (stored in order, acked by the slave, counted per message), closed →
// ErrClosed; an empty batch answers nothing.
func TestReplicaPutBatchRoles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, ast, bst, a, b := newReplicaPair(t)
		defer a.Close()
		defer b.Close()
		batch := func() []*record.Message { return []*record.Message{testMsg(10), testMsg(20), testMsg(30)} }
		ctx := context.Background()
		wantAll := func(role string, out []BatchPut, errs ...error) {
			t.Helper()
			if len(out) != 3 {
				t.Fatalf("%s: %d results for 3 messages", role, len(out))
			}
			for i, o := range out {
				for _, want := range errs {
					if !errors.Is(o.Err, want) {
						t.Errorf("%s: message %d: error %v, want %v", role, i, o.Err, want)
					}
				}
				if o.NextOffset != 0 {
					t.Errorf("%s: message %d refused with a result %+v", role, i, o.PutResult)
				}
			}
		}

		wantAll("no role", a.PutBatch(ctx, batch()), ErrNotMaster)
		if out := a.PutBatch(ctx, nil); len(out) != 0 {
			t.Fatalf("empty batch answered %+v", out)
		}
		if _, err := a.BecomeMaster(0); err != nil {
			t.Fatal(err)
		}
		follow(t, b, "a:1")
		synctest.Wait()

		wantAll("slave", b.PutBatch(ctx, batch()), ErrNotMaster, ErrSlaveWriteProtected)
		if max := bst.Bounds().Max; max != 0 {
			t.Fatalf("a slave's refused batch was stored: max offset %d", max)
		}

		out := a.PutBatch(ctx, batch())
		var prev int64
		for i, o := range out {
			if o.Err != nil || o.Status != PutOK || o.Offset != prev || o.NextOffset <= o.Offset {
				t.Fatalf("master: message %d: %+v %v (previous ended at %d)", i, o.PutResult, o.Err, prev)
			}
			prev = o.NextOffset
		}
		if len(out) != 3 || prev != ast.Bounds().Max {
			t.Fatalf("master: %d results ending at %d, log max %d", len(out), prev, ast.Bounds().Max)
		}
		if got := testutil.ToFloat64(counterOf(t, reg, "replicator_ha_puts_total")); got != 3 {
			t.Fatalf("replicator_ha_puts_total %v after a batch of 3", got)
		}
		// Put takes the same path.
		res, err := a.Put(ctx, testMsg(10))
		if err != nil || res.Offset != prev {
			t.Fatalf("master put after the batch: %+v %v, want offset %d", res, err, prev)
		}

		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		wantAll("closed", a.PutBatch(ctx, batch()), ErrClosed)
		if _, err := a.Put(ctx, testMsg(10)); !errors.Is(err, ErrClosed) {
			t.Fatalf("put on a closed replica: %v", err)
		}
	})
}
