package commitlog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
)

// model is the simplest commit log: records at offsets, with RocketMQ's
// filler rule and queue offsets counted per (topic, queue).
type model struct {
	seg  int64
	end  int64
	recs []modelRec
}

type modelRec struct {
	off, qo int64
	size    int64
	msg     *record.Message
}

func (m *model) append(msg *record.Message, size int64) modelRec {
	if pos := m.end % m.seg; size+record.FillerSize > m.seg-pos {
		m.end += m.seg - pos
	}
	var qo int64
	for _, r := range m.recs {
		if r.msg.Topic == msg.Topic && r.msg.QueueID == msg.QueueID {
			qo++
		}
	}
	r := modelRec{off: m.end, qo: qo, size: size, msg: msg}
	m.recs = append(m.recs, r)
	m.end += size
	return r
}

// boundary picks a record boundary: a record start, a filler or the end.
func (m *model) boundary(r *rand.Rand) (int64, int) {
	if len(m.recs) == 0 {
		return m.end, 0
	}
	i := r.Intn(len(m.recs) + 1)
	if i == len(m.recs) {
		return m.end, i
	}
	if i > 0 && r.Intn(3) == 0 { // the end of the previous record: maybe a filler
		p := m.recs[i-1]
		return p.off + p.size, i
	}
	return m.recs[i].off, i
}

func (m *model) truncate(off int64, i int) {
	m.recs = m.recs[:i]
	m.end = off
}

func (m *model) check(t *testing.T, l *Log, full bool) {
	t.Helper()
	if b := l.Bounds(); b.Max != m.end {
		t.Fatalf("max %d, model %d", b.Max, m.end)
	}
	if !full {
		return
	}
	recs := readAll(t, l)
	if len(recs) != len(m.recs) {
		t.Fatalf("%d records, model %d", len(recs), len(m.recs))
	}
	for i, r := range recs {
		w := m.recs[i]
		if r.PhysicalOffset != w.off || r.QueueOffset != w.qo || r.Topic != w.msg.Topic || r.QueueID != w.msg.QueueID || !bytes.Equal(r.Body, w.msg.Body) {
			t.Fatalf("record %d at %d: got topic %s queue %d qo %d, model %+v", i, r.PhysicalOffset, r.Topic, r.QueueID, r.QueueOffset, w)
		}
	}
}

// TestCommitLogModel runs random Append, Truncate, Reopen, crash-Reopen
// and replication steps against the model, with a replica following by
// AppendAt in random chunks; seeded, so a failure replays exactly.
func TestCommitLogModel(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, 300)
		})
	}
}

func runModel(t *testing.T, seed int64, steps int) {
	r := rand.New(rand.NewSource(seed))
	seg := int64(4096 << r.Intn(3))
	o := testOptions(t, seg)
	o.Preallocate = r.Intn(2) == 0
	if r.Intn(2) == 0 {
		o.FlushMode = FlushSync
	}
	mdir, rdir := t.TempDir(), t.TempDir()
	master, replica := mustOpen(t, mdir, o), mustOpen(t, rdir, o)
	defer func() { mustClose(t, master); mustClose(t, replica) }()
	m := &model{seg: seg}
	topics := []string{"A", "B", "%RETRY%g"}
	for step := 0; step < steps; step++ {
		op := r.Intn(100)
		if debugModel {
			t.Logf("step %d op %d master %+v replica %+v", step, op, master.Bounds(), replica.Bounds())
		}
		switch {
		case op < 60:
			msg := testMsg(topics[r.Intn(len(topics))], int32(r.Intn(3)), r.Intn(int(seg)/3), r.Int63())
			size := int64(len(mustEncode(t, msg)))
			want := m.append(msg, size)
			res, err := master.Append(context.Background(), msg)
			if err != nil || res.Offset != want.off || res.QueueOffset != want.qo || int64(res.Size) != size {
				t.Fatalf("step %d: Append = %+v, %v; model %+v", step, res, err, want)
			}
		case op < 70:
			off, i := m.boundary(r)
			if err := master.Truncate(off); err != nil {
				t.Fatalf("step %d: Truncate(%d): %v", step, off, err)
			}
			m.truncate(off, i)
			if replica.Bounds().Max > off {
				if err := replica.Truncate(off); err != nil {
					t.Fatalf("step %d: replica Truncate(%d): %v", step, off, err)
				}
			}
		case op < 76:
			mustClose(t, master)
			master = mustOpen(t, mdir, o)
			m.check(t, master, true)
		case op < 82: // the process dies: the files hold what the page cache held
			img := copyDir(t, mdir)
			mustClose(t, master)
			mdir = img
			master = mustOpen(t, mdir, o)
			m.check(t, master, true)
		case op < 95:
			target := replica.Bounds().Max + int64(r.Intn(int(seg)))
			replicate(t, master, replica, min(target, m.end), r, int(seg)/2)
			if debugModel {
				sameBytes(t, master, replica, master.Bounds().Min, replica.Bounds().Max)
			}
		default:
			mustClose(t, replica)
			replica = mustOpen(t, rdir, o)
		}
		m.check(t, master, step%25 == 0)
	}
	m.check(t, master, true)
	replicate(t, master, replica, m.end, r, int(seg))
	sameBytes(t, master, replica, master.Bounds().Min, m.end)
	m.check(t, replica, true)
}

const debugModel = false
