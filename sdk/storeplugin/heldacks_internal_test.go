package storeplugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/store/memstore"
)

// viewCounting counts the views of its store that are out.
type viewCounting struct {
	store.Store
	out atomic.Int64
}

func (s *viewCounting) Read(off int64, max int) (store.View, error) {
	v, err := s.Store.Read(off, max)
	if err != nil {
		return v, err
	}
	s.out.Add(1)
	return store.View{Offset: v.Offset, Data: v.Data, Ref: releaseFunc(func() { v.Release(); s.out.Add(-1) })}, nil
}

type releaseFunc func()

func (f releaseFunc) Release() { f() }

// recordingAcks holds acks while hold says so and records what each flush
// sent, copying the records as the socket would.
type recordingAcks struct {
	holds   []bool // hold's answers, in order; false once used up
	pending []*storev1.AppendAck
	recs    [][][]byte
	flushes [][]uint64 // the seqs each flush sent
	sent    map[uint64][][]byte
	flushed bool // the last call was a flush
}

func (a *recordingAcks) put(ack *storev1.AppendAck, records [][]byte) error {
	a.flushed = false
	a.pending = append(a.pending, ack)
	a.recs = append(a.recs, append([][]byte(nil), records...)) // slices, as QueueParts keeps them
	return nil
}

func (a *recordingAcks) flush() error {
	var seqs []uint64
	for i, ack := range a.pending {
		seqs = append(seqs, ack.Seq)
		var cp [][]byte
		for _, r := range a.recs[i] {
			cp = append(cp, bytes.Clone(r))
		}
		a.sent[ack.Seq] = cp
	}
	if len(seqs) > 0 {
		a.flushes = append(a.flushes, seqs)
	}
	a.pending, a.recs = nil, nil
	a.flushed = true
	return nil
}

func (a *recordingAcks) hold() bool {
	if len(a.holds) == 0 {
		return false
	}
	h := a.holds[0]
	a.holds = a.holds[1:]
	return h
}

// TestPluginHeldAcks: while the next batch is arriving the server holds
// acks (at most maxHeldAcks) and sends them together, in order, with the
// bytes each Append stored; the views behind them are released once sent.
func TestPluginHeldAcks(t *testing.T) {
	st := &viewCounting{Store: memstore.New(1 << 20)}
	defer st.Close()
	s := newServer(nil, nil)
	const batches = maxHeldAcks + 4
	holds := make([]bool, batches)
	for i := range holds {
		holds[i] = i != 2 // flush after the third batch, then hold as long as allowed
	}
	acks := &recordingAcks{holds: holds, sent: map[uint64][][]byte{}}
	n := 0
	recv := func() (*storev1.AppendBatch, [][]byte, error) {
		if acks.flushed && st.out.Load() != 0 {
			t.Errorf("before batch %d: %d views out after a flush", n+1, st.out.Load())
		}
		if n == batches {
			return nil, nil, io.EOF
		}
		n++
		b := &storev1.AppendBatch{Seq: uint64(n), WantRecords: true}
		var parts [][]byte
		for j := range 2 {
			b.Ops = append(b.Ops, &storev1.AppendOp{Op: &storev1.AppendOp_Message{Message: &storev1.Message{Topic: "T"}}})
			parts = append(parts, bytes.Repeat([]byte{byte(n*2 + j)}, 100+n))
		}
		return b, parts, nil
	}
	if err := s.serveAppend(context.Background(), st, recv, acks); err != nil {
		t.Fatal(err)
	}
	want := [][]uint64{{1, 2, 3}}
	var group []uint64
	for seq := uint64(4); seq <= batches; seq++ {
		group = append(group, seq)
		if len(group) == maxHeldAcks || seq == batches {
			want = append(want, group)
			group = nil
		}
	}
	if fmt.Sprint(acks.flushes) != fmt.Sprint(want) {
		t.Fatalf("flushes %v, want %v", acks.flushes, want)
	}
	if out := st.out.Load(); out != 0 {
		t.Fatalf("%d views not released", out)
	}
	off := int64(0)
	for seq := uint64(1); seq <= batches; seq++ {
		recs := acks.sent[seq]
		if len(recs) != 2 {
			t.Fatalf("ack %d: %d records", seq, len(recs))
		}
		for j, r := range recs {
			v, err := st.Store.Read(off, len(r))
			if err != nil || !bytes.Equal(v.Data, r) || len(r) == 0 {
				t.Fatalf("ack %d record %d: %d bytes, not the stored ones (%v)", seq, j, len(r), err)
			}
			v.Release()
			off += int64(len(r))
		}
	}
}
