package commitlog

import (
	"maps"
	"math/rand"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
)

// dispatchState reads the dispatched offset and a copy of the queue table.
func dispatchState(l *Log) (int64, queueTable) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dispatched, l.queues.clone()
}

// TestDispatchBackground: replicated bytes are dispatched off the append
// path: AppendAt leaves the dispatched offset behind, the dispatcher
// catches up without any further call (polling with a deadline, the
// dispatcher is a real goroutine), across segment ends, to the table the
// master holds; the tail under dispatchBatch it leaves is drained by
// Close, whose checkpoint then holds the master's table at the max offset.
func TestDispatchBackground(t *testing.T) {
	const seg = 1 << 20
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for i := 0; master.Bounds().Max < 3*seg+seg/2; i++ {
		mustAppend(t, master, testMsg([]string{"A", "B", "C"}[i%3], int32(i%4), 500+i%3000, int64(i)))
	}
	mend := master.Bounds().Max
	_, want := dispatchState(master)

	rdir := t.TempDir()
	replica := mustOpen(t, rdir, testOptions(t, seg))
	replicate(t, master, replica, mend, rand.New(rand.NewSource(1)), 32<<10)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, _ := dispatchState(replica)
		if mend-d < dispatchBatch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatched offset %d, max %d: the dispatcher did not catch up", d, mend)
		}
		time.Sleep(time.Millisecond)
	}
	mustClose(t, replica)
	c, err := readCheckpoint(vfs.Default, replica.ckptPath)
	if err != nil {
		t.Fatal(err)
	}
	if c.Scan != mend || !maps.EqualFunc(c.Queues, want, maps.Equal) {
		t.Fatalf("checkpoint after Close: scan %d (want %d), queues %v (want %v)", c.Scan, mend, c.Queues, want)
	}
}
