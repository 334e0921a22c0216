package core

import (
	"io"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCoreMasterNegativeReportIsMalformed: a negative report closes the
// connection with reason "malformed" (docs/protocol.md, the metric table),
// whether it is the first value or a later ack, not as a read error.
func TestCoreMasterNegativeReportIsMalformed(t *testing.T) {
	for name, reports := range map[string][][]byte{
		"first": {be64(-1)},
		"ack":   {be64(1000), be64(-5)},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(1 << 20)
				st.fill(t, 0, 5000)
				tr := newPipeTransport()
				reg := prometheus.NewPedanticRegistry()
				m := startMaster(t, st, tr, MasterConfig{Registerer: reg})
				defer m.Close()
				c := dial(t, tr)
				defer c.Close()
				go io.Copy(io.Discard, c)
				for _, r := range reports {
					if _, err := c.Write(r); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				if got := testutil.ToFloat64(m.met.closes.WithLabelValues("malformed")); got != 1 {
					t.Errorf("closes{reason=malformed} = %v, want 1", got)
				}
				if got := testutil.ToFloat64(m.met.closes.WithLabelValues("read_error")); got != 0 {
					t.Errorf("closes{reason=read_error} = %v, want 0", got)
				}
			})
		})
	}
}
