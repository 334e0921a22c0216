package core

import (
	"io"
	"time"

	"github.com/replicatorhq/replicator/transport"
)

// AppenderFrom is an optional extension of store.Store. A slave whose store
// implements it, on a connection with a file descriptor (plain TCP), hands
// each frame body to the store as a reader over the socket, instead of
// reading it into a buffer of its own for AppendAt: the store chooses where
// the bytes land (the commitlog store reads them into a buffer it reuses
// and writes them to the segment file with pwrite). The store.Store
// interface itself is unchanged; the slave finds the extension with a type
// assertion.
//
// AppendAtFrom reads exactly n bytes from r (as io.ReadFull) and appends
// them at offset under AppendAt's rules: offset equals the max offset (or
// is a segment boundary on an empty log), and the bytes do not cross a
// segment end (ErrSegmentOverflow, checked before reading anything).
// Nothing becomes visible to Read, Bounds or Watch before all n bytes are
// in. If r fails, the log is unchanged and the returned error wraps r's.
// r may block (it is a socket): the store must not hold, while it reads,
// any lock that Read, Bounds or a flush needs.
type AppenderFrom interface {
	AppendAtFrom(offset int64, n int, r io.Reader) (int64, error)
}

// reportEvery bounds the bytes applied between two reports on the direct
// path while the socket never runs dry (a catch-up at full speed), so that
// the master's view of the slave keeps moving.
const reportEvery = 1 << 20

// directLoop is readLoop for a store that implements AppenderFrom, reading
// with vr: frame headers are parsed from a small staging buffer, bodies go
// from the socket into the store. Reports go out when vr is about to wait
// for the master (the batch received so far is applied), and at least every
// reportEvery bytes.
func (ss *slaveSession) directLoop(app AppenderFrom, vr transport.VectorReader) error {
	s := ss.s
	dr := transport.NewDirectReader(vr, s.cfg.MaxFrameBody)
	br := bodyReader{r: dr}
	for {
		h, err := dr.Next()
		if err != nil {
			return ss.readFailed(err)
		}
		now := time.Now()
		cur := ss.max.Load()
		if cur != 0 && h.Offset != cur {
			return ss.mismatch(h.Offset, h.Size, cur)
		}
		s.lastFrame.Store(now.UnixNano())
		if h.Size == 0 {
			if s.met != nil {
				s.met.heartbeats.Inc()
			}
			continue
		}
		br.err = nil
		newMax, err := app.AppendAtFrom(h.Offset, h.Size, &br)
		if err != nil {
			if br.err != nil {
				return ss.readFailed(br.err)
			}
			return s.appendFailed(h.Offset, h.Size, err)
		}
		ss.max.Store(newMax)
		s.clearSegmentError()
		if s.met != nil {
			s.met.recvBytes.Add(float64(h.Size))
			s.met.recvFrames.Inc()
		}
	}
}

// bodyReader remembers the read error that made AppendAtFrom fail, to tell
// a broken connection from a failed store.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}
