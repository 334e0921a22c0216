package transport

import (
	"fmt"
	"io"
)

// AutoSwitchDirectReader parses master->slave frames of the AutoSwitch
// protocol, like MasterFrameReader, but hands each transfer body to its
// destination instead of returning a view of its own buffer, as
// DirectReader does for the classic protocol: after Next returns a
// TRANSFER frame (Body nil), its Transfer.Size body bytes are read through
// Read straight into the caller's memory; the rest of a large body is read
// from the stream directly into the caller's buffer, together with up to a
// transfer header of the next frame in the same vectored read. A HANDSHAKE
// frame is returned whole (its epoch list aliases the reader's buffer until
// the next Next); it has no body to read.
//
// Validation and errors are MasterFrameReader's: sticky *FrameError
// protocol violations, io.EOF bare between frames, ErrTruncated (also
// io.ErrUnexpectedEOF) inside one, and wrapped read errors after which Next
// or Read may be called again. It is not safe for concurrent use.
type AutoSwitchDirectReader struct {
	r     VectorReader
	buf   []byte
	start int // first unconsumed byte of buf
	end   int // end of buffered bytes
	body  int // body bytes of the current frame not yet read
	need  int // size of the current frame (header and body), for errors
	rerr  error
	iov   [2][]byte
	empty int
	large bool // the last body was read directly: the next fill reads a header only
	p     masterParser
}

// NewAutoSwitchDirectReader returns an AutoSwitchDirectReader on vr
// accepting transfer bodies of at most maxBody bytes (<= 0 or above
// MaxTransferBodyLimit: MaxTransferBodyLimit).
func NewAutoSwitchDirectReader(vr VectorReader, maxBody int) *AutoSwitchDirectReader {
	return &AutoSwitchDirectReader{r: vr, buf: make([]byte, stagingWindow),
		p: masterParser{maxBody: normalizeTransferMaxBody(maxBody)}}
}

// MaxBody is the largest transfer body this reader accepts.
func (d *AutoSwitchDirectReader) MaxBody() int { return d.p.maxBody }

// Buffered is the number of bytes read from the stream and not yet handed
// out.
func (d *AutoSwitchDirectReader) Buffered() int { return d.end - d.start }

// Remaining is the number of body bytes of the current frame not yet read.
func (d *AutoSwitchDirectReader) Remaining() int { return d.body }

// Next returns the next frame's header, validated (a handshake wholly
// decoded), blocking until it is buffered. A transfer body must then be
// read with Read before the next call, else Next returns ErrBodyPending.
func (d *AutoSwitchDirectReader) Next() (MasterFrame, error) {
	if d.p.sticky != nil {
		return MasterFrame{}, d.p.sticky
	}
	if d.body > 0 {
		return MasterFrame{}, ErrBodyPending
	}
	for {
		hsize, total, err := d.p.header(d.buf[d.start:d.end])
		if err != nil {
			return MasterFrame{}, err
		}
		if total == 0 {
			d.need = hsize
		} else {
			st := stateAt(d.buf[d.start:])
			if st == StateTransfer {
				h := d.p.th
				d.start += TransferHeaderSize
				d.p.pos += int64(total)
				d.body = int(h.Size)
				d.need = total
				d.large = d.body >= directMin
				d.compact()
				return MasterFrame{State: st, Transfer: h}, nil
			}
			d.need = total
			d.large = false // a handshake body is staged, never read direct
			if d.end-d.start >= total {
				hs, err := d.p.handshake(d.buf[d.start : d.start+total])
				if err != nil {
					return MasterFrame{}, err
				}
				d.start += total
				d.p.pos += int64(total)
				d.compact()
				return MasterFrame{State: st, Handshake: hs}, nil
			}
		}
		if err := d.fill(); err != nil {
			return MasterFrame{}, err
		}
	}
}

// Read reads the current transfer body into p: at most the body bytes still
// to come, io.EOF once the whole body was read.
func (d *AutoSwitchDirectReader) Read(p []byte) (int, error) {
	if d.body == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), d.body)]
	if n := d.end - d.start; n > 0 {
		n = copy(p, d.buf[d.start:d.end])
		d.start += n
		d.body -= n
		d.compact()
		return n, nil
	}
	if d.p.sticky != nil {
		return 0, d.p.sticky
	}
	if err := d.rerr; err != nil {
		d.rerr = nil
		return 0, d.p.readError(err, d.need-d.body, d.need, "transfer frame")
	}
	if !d.large {
		if err := d.fill(); err != nil {
			return 0, err
		}
		return d.Read(p)
	}
	d.start, d.end = 0, 0
	d.iov[0], d.iov[1] = p, d.buf[:TransferHeaderSize]
	n, err := d.r.ReadVec(d.iov[:])
	d.iov[0] = nil
	if n < 0 || n > len(p)+TransferHeaderSize {
		d.p.sticky = fmt.Errorf("transport: read master frame: invalid read count %d", n)
		return 0, d.p.sticky
	}
	got := min(n, len(p))
	d.end = n - got
	d.body -= got
	if err != nil {
		if got > 0 || d.end > 0 {
			d.rerr = err
		} else {
			return 0, d.p.readError(err, d.need-d.body, d.need, "transfer frame")
		}
	}
	if n == 0 && err == nil {
		if d.empty++; d.empty >= maxEmptyReads {
			return 0, fmt.Errorf("transport: read master frame: %w", io.ErrNoProgress)
		}
	} else {
		d.empty = 0
	}
	return got, nil
}

// fill reads once into the staging buffer; callers loop. It is called
// with less than the next frame's header (or a handshake's whole frame)
// buffered, or with nothing buffered and a small rest of a body to come.
func (d *AutoSwitchDirectReader) fill() error {
	if err := d.rerr; err != nil {
		d.rerr = nil
		avail := d.end - d.start
		if d.body > 0 {
			return d.p.readError(err, d.need-d.body+avail, d.need, "transfer frame")
		}
		return d.p.readError(err, avail, d.need, "master frame")
	}
	if d.start > 0 {
		d.end = copy(d.buf, d.buf[d.start:d.end])
		d.start = 0
	}
	limit := len(d.buf)
	if d.large && d.body == 0 {
		// After a large body, at a frame boundary where the stream paused:
		// fetch just a header, so that a large body that follows goes
		// straight to its destination.
		limit = TransferHeaderSize
	}
	d.iov[0], d.iov[1] = d.buf[d.end:limit], nil
	n, err := d.r.ReadVec(d.iov[:1])
	d.iov[0] = nil
	if n < 0 || n > limit-d.end {
		d.p.sticky = fmt.Errorf("transport: read master frame: invalid read count %d", n)
		return d.p.sticky
	}
	d.end += n
	if err != nil {
		d.rerr = err
		if n == 0 {
			return d.fill()
		}
		return nil
	}
	if n == 0 {
		if d.empty++; d.empty >= maxEmptyReads {
			return fmt.Errorf("transport: read master frame: %w", io.ErrNoProgress)
		}
		return nil
	}
	d.empty = 0
	return nil
}

func (d *AutoSwitchDirectReader) compact() {
	if d.start == d.end {
		d.start, d.end = 0, 0
	}
}
