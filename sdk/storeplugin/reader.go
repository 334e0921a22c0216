package storeplugin

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// reader serves Client.Read: bytes [off, end) of the segment at base, where
// end is already clamped to the max offset and the segment end.
type reader interface {
	read(off, end, base, segSize int64) (store.View, error)
	invalidate()    // the log was truncated: forget everything
	trim(min int64) // bytes below min are gone
	close()         // Close: release what no view pins
}

// streamReader fills a small cache of chunks with ReadStream calls of
// ReadAheadBytes. Views point into the cached chunks, which are never
// reused, so they need no release.
type streamReader struct {
	c      *Client
	mu     sync.Mutex
	epoch  uint64 // bumped by invalidate; a fetch from an older epoch is dropped
	chunks []cachedChunk
}

type cachedChunk struct {
	off  int64
	data []byte
}

// streamCacheChunks bounds the cache (with 256 KiB chunks: 8 MiB).
const streamCacheChunks = 32

func newStreamReader(c *Client) *streamReader { return &streamReader{c: c} }

func (r *streamReader) lookup(off, end int64) (store.View, bool) {
	for i := len(r.chunks) - 1; i >= 0; i-- {
		ch := r.chunks[i]
		if off >= ch.off && off < ch.off+int64(len(ch.data)) {
			hi := min(end, ch.off+int64(len(ch.data)))
			return store.View{Offset: off, Data: ch.data[off-ch.off : hi-ch.off : hi-ch.off]}, true
		}
	}
	return store.View{}, false
}

func (r *streamReader) read(off, end, _, _ int64) (store.View, error) {
	r.mu.Lock()
	if v, ok := r.lookup(off, end); ok {
		r.mu.Unlock()
		return v, nil
	}
	epoch := r.epoch
	r.mu.Unlock()

	rs, err := r.c.rpc.ReadStream(r.c.ctx, &storev1.ReadStreamRequest{
		From:       off,
		MaxBytes:   int64(max(r.c.cfg.ReadAheadBytes, int(end-off))),
		ChunkBytes: int32(r.c.cfg.ChunkBytes),
	})
	if err != nil {
		return store.View{}, fmt.Errorf("storeplugin: read stream at %d: %w", off, r.c.fail(err))
	}
	var got []cachedChunk
	for {
		ch, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return store.View{}, fmt.Errorf("storeplugin: read stream at %d: %w", off, r.c.fail(err))
		}
		got = append(got, cachedChunk{off: ch.Offset, data: ch.Data})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epoch == epoch {
		r.chunks = append(r.chunks, got...)
		if n := len(r.chunks) - streamCacheChunks; n > 0 {
			r.chunks = append([]cachedChunk(nil), r.chunks[n:]...)
		}
	}
	if len(got) == 0 || got[0].off != off {
		return store.View{}, fmt.Errorf("storeplugin: read stream at %d returned no data below the max offset %d: %w", off, end, store.ErrOffsetOutOfRange)
	}
	hi := min(end, off+int64(len(got[0].data)))
	return store.View{Offset: off, Data: got[0].data[: hi-off : hi-off]}, nil
}

func (r *streamReader) invalidate() {
	r.mu.Lock()
	r.epoch++
	r.chunks = nil
	r.mu.Unlock()
}

func (r *streamReader) trim(min int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.chunks[:0]
	for _, ch := range r.chunks {
		if ch.off+int64(len(ch.data)) > min {
			keep = append(keep, ch)
		}
	}
	r.chunks = keep
}

func (r *streamReader) close() { r.invalidate() }
