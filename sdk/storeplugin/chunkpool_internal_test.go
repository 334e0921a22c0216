package storeplugin

import (
	"bytes"
	"testing"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// patternChunks is a chunk source as a ReadChannel reader is: chunk i (at
// i*size) is size bytes of byte(i), in a buffer from the pool.
type patternChunks struct {
	pool *chunkPool
	size int
	next int64
}

func (p *patternChunks) Recv() (*storev1.Chunk, *chunkBuf, error) {
	b := p.pool.get(p.size)
	for i := range b {
		b[i] = byte(p.next / int64(p.size))
	}
	cb := &chunkBuf{buf: b, pool: p.pool}
	cb.refs.Store(1)
	c := &storev1.Chunk{Offset: p.next, Data: b}
	p.next += int64(p.size)
	return c, cb, nil
}

func (p *patternChunks) Close() {}

// TestPluginChunkPool: a read-ahead chunk goes back to the pool only once
// the cache dropped it and every view of it was released (two copies of a
// view released count once); a view never released keeps its bytes.
func TestPluginChunkPool(t *testing.T) {
	const size = 4096
	r := newStreamReader(&Client{})
	src := &patternChunks{pool: &r.pool, size: size}
	r.cur = &cursor{rs: src, next: 0}
	read := func(i int) store.View {
		t.Helper()
		v, err := r.read(int64(i)*size, int64(i+1)*size)
		if err != nil || len(v.Data) != size || v.Data[0] != byte(i) || v.Data[size-1] != byte(i) {
			t.Fatalf("chunk %d: %d bytes, %v", i, len(v.Data), err)
		}
		return v
	}
	held := read(0) // never released
	v1 := read(1)
	buf1 := &v1.Data[0]
	c1 := v1
	v1.Release()
	c1.Release() // the same reference: must not count again
	if v := read(2); &v.Data[0] == buf1 {
		t.Fatal("a cached chunk's buffer was reused after its view was released twice")
	} else {
		v.Release()
	}
	if again, ok := r.lookup(size, 2*size); !ok || !bytes.Equal(again.Data, bytes.Repeat([]byte{1}, size)) {
		t.Fatal("chunk 1 changed in the cache")
	} else {
		again.Release()
	}
	reused := false
	for i := 3; i < 3+2*streamCacheChunks; i++ {
		v := read(i)
		if &v.Data[0] == &held.Data[0] {
			t.Fatalf("chunk %d reuses the buffer of a view never released", i)
		}
		reused = reused || &v.Data[0] == buf1
		v.Release()
	}
	if !reused {
		t.Fatal("no chunk reused a released buffer the cache had dropped")
	}
	if !bytes.Equal(held.Data, bytes.Repeat([]byte{0}, size)) {
		t.Fatal("a view never released changed")
	}
	r.invalidate()
}
