package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReplicaBecomeMasterCutsPartialRecord: a replica whose log ends
// inside a record (its master died, or the link went, while sending it)
// is promoted by hand (replicator promote, POST /v1/role), as a slave or
// without a role: BecomeMaster cuts the partial record, the max offset is
// the last whole record's end, the new epoch starts there, the cut is
// logged at WARN with from, to and bytes and counted in
// replicator_ha_truncated_bytes_total, and the master takes puts. A log
// that ends at a record boundary is left alone.
func TestReplicaBecomeMasterCutsPartialRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		slave   bool
		partial int
	}{
		{"slave", true, 40},
		{"no-role", false, 40},
		{"slave-whole-records", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(1 << 20)
				st.fillRecords(t, 0, 2000, 800)
				whole := st.Bounds().Max
				if tc.partial > 0 {
					// The first bytes of a record: a header that
					// announces more.
					half := slices.Clone(st.bytesAt(800, 800+int64(tc.partial)))
					if _, err := st.AppendAt(whole, half); err != nil {
						t.Fatal(err)
					}
				}
				reg := prometheus.NewRegistry()
				logger, logs := newTestLogger(t)
				r, err := NewReplica(ReplicaConfig{Store: st, Transport: newPipeTransport(), Epochs: testEpochs(t, 1, 0), BrokerID: 2,
					Master: MasterConfig{ListenAddr: "b:1"}, Logger: logger, Registerer: reg})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if tc.slave {
					if err := r.BecomeSlave("gone:1"); err != nil { // its master is gone
						t.Fatal(err)
					}
					synctest.Wait()
				}
				ep, err := r.BecomeMaster(0)
				if err != nil {
					t.Fatal(err)
				}
				if got := st.Bounds().Max; got != whole {
					t.Fatalf("max offset %d after the promotion, want %d (the last whole record's end)", got, whole)
				}
				if e, _ := r.cfg.Epochs.Last(); e.Epoch != ep || e.StartOffset != whole {
					t.Fatalf("last epoch entry %+v, want epoch %d from %d", e, ep, whole)
				}
				line := fmt.Sprintf("from=%d to=%d bytes=%d", whole+int64(tc.partial), whole, tc.partial)
				wantLines := 0
				if tc.partial > 0 {
					wantLines = 1
				}
				if n := logs.count("[WARN]  test.replica: cut the partial record the log ended inside of before becoming master"); n != wantLines {
					t.Fatalf("%d cut lines, want %d", n, wantLines)
				}
				if tc.partial > 0 && logs.count(line) != 1 {
					t.Fatalf("no cut line with %q", line)
				}
				want := fmt.Sprintf(`
# HELP replicator_ha_truncated_bytes_total %s
# TYPE replicator_ha_truncated_bytes_total counter
replicator_ha_truncated_bytes_total %d
`, truncatedHelp, tc.partial)
				if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "replicator_ha_truncated_bytes_total"); err != nil {
					t.Fatal(err)
				}
				res, err := r.Put(context.Background(), testMsg(10))
				if err != nil || res.Status != PutOK || res.Offset != whole {
					t.Fatalf("put after the promotion: %+v %v, want PUT_OK at %d", res, err, whole)
				}
			})
		})
	}
}
