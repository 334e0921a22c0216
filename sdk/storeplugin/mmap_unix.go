//go:build unix

package storeplugin

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

const mmapSupported = true

// mmapReader maps the plugin's segment files read-only (MAP_SHARED, so it
// sees the plugin's writes through the page cache) and hands out views into
// the mappings. A mapping is reference counted by its views; one that is
// replaced (the file grew), dropped (truncate, trim) or closed is unmapped
// when its last view is released.
type mmapReader struct {
	c     *Client
	mu    sync.Mutex
	maps  map[int64]*mapping // current mapping per segment base
	paths map[int64]string
}

type mapping struct {
	r       *mmapReader
	base    int64
	data    []byte
	refs    int
	retired bool
}

func newMmapReader(c *Client) *mmapReader {
	return &mmapReader{c: c, maps: make(map[int64]*mapping), paths: make(map[int64]string)}
}

// Release unpins one view of the mapping.
func (m *mapping) Release() {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	m.refs--
	if m.retired && m.refs == 0 {
		m.unmap()
	}
}

func (m *mapping) unmap() {
	if m.data != nil {
		_ = syscall.Munmap(m.data)
		m.data = nil
	}
}

// retire drops m from use: unmapped now if nothing pins it, else on the
// last Release. Called with r.mu held.
func (m *mapping) retire() {
	m.retired = true
	if m.refs == 0 {
		m.unmap()
	}
}

func (r *mmapReader) read(off, end, base, segSize int64) (store.View, error) {
	r.mu.Lock()
	m := r.maps[base]
	if m == nil || int64(len(m.data)) < end-base {
		path := r.paths[base]
		r.mu.Unlock()
		nm, p, err := r.mapSegment(base, segSize, path)
		if err != nil {
			return store.View{}, err
		}
		r.mu.Lock()
		r.paths[base] = p
		if cur := r.maps[base]; cur != nil && len(cur.data) >= len(nm.data) {
			nm.unmap() // another reader mapped it meanwhile
		} else {
			if cur != nil {
				cur.retire()
			}
			r.maps[base] = nm
		}
		m = r.maps[base]
		if int64(len(m.data)) < end-base {
			n := len(m.data)
			r.mu.Unlock()
			return store.View{}, fmt.Errorf("storeplugin: segment file %s holds %d bytes, below the max offset %d: %w", p, n, end, store.ErrCorrupt)
		}
	}
	m.refs++
	r.mu.Unlock()
	return store.View{Offset: off, Data: m.data[off-base : end-base : end-base], Ref: m}, nil
}

// mapSegment asks the plugin for the segment's file (once) and maps as much
// of it as the file holds, up to segSize.
func (r *mmapReader) mapSegment(base, segSize int64, path string) (*mapping, string, error) {
	if path == "" {
		ctx, cancel := r.c.callCtx()
		resp, err := r.c.rpc.SegmentFile(ctx, &storev1.SegmentFileRequest{Base: base})
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("storeplugin: segment file at %d: %w", base, r.c.fail(err))
		}
		path = resp.Path
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("storeplugin: segment file at %d: %w", base, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("storeplugin: segment file at %d: %w", base, err)
	}
	n := fi.Size()
	if segSize > 0 {
		n = min(n, segSize)
	}
	if n <= 0 {
		return nil, "", fmt.Errorf("storeplugin: segment file %s is empty: %w", path, store.ErrCorrupt)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, "", fmt.Errorf("storeplugin: map %s: %w", path, err)
	}
	return &mapping{r: r, base: base, data: data}, path, nil
}

func (r *mmapReader) invalidate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for b, m := range r.maps {
		m.retire()
		delete(r.maps, b)
	}
	clear(r.paths)
}

func (r *mmapReader) trim(min int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for b, m := range r.maps {
		if b+int64(len(m.data)) <= min {
			m.retire()
			delete(r.maps, b)
			delete(r.paths, b)
		}
	}
}

func (r *mmapReader) close() { r.invalidate() }
