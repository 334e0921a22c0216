package storeplugin

import (
	"fmt"
	"testing"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
)

func inPlaceOp(off, n int64) *pendingOp {
	return &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_InPlace{InPlace: &storev1.InPlace{Offset: off, Length: n}}}}
}

// TestPluginWireOpsMerge: contiguous in-place ops inside one segment go as
// one op; a raw op, a gap or a segment end starts a new one; the queued
// ops themselves are not changed.
func TestPluginWireOpsMerge(t *testing.T) {
	a := &appender{c: &Client{segSize: 1000, segAnchor: 3000}}
	raw := &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_Raw{Raw: &storev1.RawAppend{Offset: 170}}}}
	ops := []*pendingOp{
		inPlaceOp(0, 100), inPlaceOp(100, 50), inPlaceOp(150, 20), // one op
		raw,
		inPlaceOp(200, 10), inPlaceOp(220, 10), // a gap: two ops
		inPlaceOp(990, 10), inPlaceOp(1000, 10), // a segment end: two ops
	}
	wire, groups := a.wireOps(ops)
	var got []string
	for _, w := range wire {
		if ip, ok := w.Op.(*storev1.AppendOp_InPlace); ok {
			got = append(got, fmt.Sprintf("%d+%d", ip.InPlace.Offset, ip.InPlace.Length))
		} else {
			got = append(got, "raw")
		}
	}
	if fmt.Sprint(got) != "[0+170 raw 200+10 220+10 990+10 1000+10]" || fmt.Sprint(groups) != "[3 1 1 1 1 1]" {
		t.Fatalf("wire %v groups %v", got, groups)
	}
	if l := ops[0].op.Op.(*storev1.AppendOp_InPlace).InPlace.Length; l != 100 {
		t.Fatalf("the first queued op was changed: length %d", l)
	}
}
