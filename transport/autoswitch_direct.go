package transport

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
	s bodyStream // staging and body streaming, shared with DirectReader
	p masterParser
}

// NewAutoSwitchDirectReader returns an AutoSwitchDirectReader on vr
// accepting transfer bodies of at most maxBody bytes (<= 0 or above
// MaxTransferBodyLimit: MaxTransferBodyLimit).
func NewAutoSwitchDirectReader(vr VectorReader, maxBody int) *AutoSwitchDirectReader {
	d := &AutoSwitchDirectReader{p: masterParser{maxBody: normalizeTransferMaxBody(maxBody)}}
	d.s = newBodyStream(vr, TransferHeaderSize, "master frame", "transfer frame", &d.p.sticky)
	return d
}

// MaxBody is the largest transfer body this reader accepts.
func (d *AutoSwitchDirectReader) MaxBody() int { return d.p.maxBody }

// Buffered is the number of bytes read from the stream and not yet handed
// out.
func (d *AutoSwitchDirectReader) Buffered() int { return len(d.s.staged()) }

// Remaining is the number of body bytes of the current frame not yet read.
func (d *AutoSwitchDirectReader) Remaining() int { return d.s.body }

// Next returns the next frame's header, validated (a handshake wholly
// decoded), blocking until it is buffered. A transfer body must then be
// read with Read before the next call, else Next returns ErrBodyPending.
func (d *AutoSwitchDirectReader) Next() (MasterFrame, error) {
	if d.p.sticky != nil {
		return MasterFrame{}, d.p.sticky
	}
	if d.s.body > 0 {
		return MasterFrame{}, ErrBodyPending
	}
	for {
		b := d.s.staged()
		hsize, total, err := d.p.header(b)
		if err != nil {
			return MasterFrame{}, err
		}
		d.s.need = total
		if total == 0 {
			d.s.need = hsize
		} else if st := stateAt(b); st == StateTransfer {
			h := d.p.th
			d.p.pos += int64(total)
			d.s.startBody(TransferHeaderSize, int(h.Size), total)
			return MasterFrame{State: st, Transfer: h}, nil
		} else {
			d.s.large = false // a handshake body is staged, never read direct
			if len(b) >= total {
				hs, err := d.p.handshake(b[:total])
				if err != nil {
					return MasterFrame{}, err
				}
				d.p.pos += int64(total)
				d.s.skip(total)
				return MasterFrame{State: st, Handshake: hs}, nil
			}
		}
		if err := d.s.fill(); err != nil {
			return MasterFrame{}, err
		}
	}
}

// Read reads the current transfer body into p: at most the body bytes still
// to come, io.EOF once the whole body was read.
func (d *AutoSwitchDirectReader) Read(p []byte) (int, error) { return d.s.read(p) }
