package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// The slave's receive loop, one for both protocols and both body paths:
// receive a frame, append its body, report. The frame source (a receiver)
// parses headers; the body goes to the store through the receiver's body
// callback (AppendAt from the reader's buffer, or AppendAtFrom straight
// from the socket). The loop decides when to report: when the reader says
// that nothing is buffered (transport.ErrWouldBlock from an armed
// transport.ConnReader: everything received is applied), and at least
// every reportEvery bytes.

// rxFrame is one master frame of either protocol. Classic frames are
// TRANSFER frames with Offset and Size only.
type rxFrame struct {
	state transport.HAState
	hs    transport.MasterHandshake
	th    transport.TransferHeader
	body  []byte // buffered receivers: the body; direct: nil
}

// receiver is a frame source.
type receiver interface {
	next() (rxFrame, error)
	// appendBody appends the current frame's body (the body callback).
	appendBody(st store.Log, f *rxFrame) (int64, error)
	// readBody returns the current frame's body in memory, for the
	// checks that look at bytes before appending them.
	readBody(f *rxFrame) ([]byte, error)
}

// newReceiver picks the frame source: direct (zero-copy) when the store
// implements store.AppenderFrom and the connection has a file descriptor,
// buffered otherwise.
func (ss *slaveSession) newReceiver() receiver {
	s := ss.s
	app, direct := s.st.(store.AppenderFrom)
	direct = direct && ss.cr.Vectored()
	as := s.cfg.Protocol == ProtocolAutoSwitch
	switch {
	case direct && as:
		r := transport.NewAutoSwitchDirectReader(ss.cr, s.cfg.MaxFrameBody)
		return &asDirectRx{app: app, r: r, br: newBodyReader(r)}
	case direct:
		r := transport.NewDirectReader(ss.cr, s.cfg.MaxFrameBody)
		return &classicDirectRx{app: app, r: r, br: newBodyReader(r)}
	case as:
		return &asBufRx{r: transport.NewMasterFrameReader(ss.cr, s.cfg.MaxFrameBody)}
	}
	return &classicBufRx{r: transport.NewFrameReader(ss.cr, s.cfg.MaxFrameBody)}
}

type classicBufRx struct{ r *transport.FrameReader }

func (x *classicBufRx) next() (rxFrame, error) {
	f, err := x.r.Next()
	return rxFrame{state: transport.StateTransfer, th: transport.TransferHeader{Offset: f.Offset, Size: int32(len(f.Body))}, body: f.Body}, err
}
func (x *classicBufRx) appendBody(st store.Log, f *rxFrame) (int64, error) {
	return st.AppendAt(f.th.Offset, f.body)
}
func (x *classicBufRx) readBody(f *rxFrame) ([]byte, error) { return f.body, nil }

type asBufRx struct{ r *transport.MasterFrameReader }

func (x *asBufRx) next() (rxFrame, error) {
	f, err := x.r.Next()
	return rxFrame{state: f.State, hs: f.Handshake, th: f.Transfer, body: f.Body}, err
}
func (x *asBufRx) appendBody(st store.Log, f *rxFrame) (int64, error) {
	return st.AppendAt(f.th.Offset, f.body)
}
func (x *asBufRx) readBody(f *rxFrame) ([]byte, error) { return f.body, nil }

// reportEvery bounds the bytes applied between two reports while the
// socket never runs dry (a catch-up at full speed), so that the master's
// view of the slave keeps moving: 4 MiB, as RocketMQ's slave, which reports
// after each read of its 4 MiB buffer. Every report wakes the master's
// reader; at 1 MiB a catch-up ran 20 % slower (docs/benchmarks.md).
const reportEvery = 4 << 20

// bodyReader remembers the read error that made AppendAtFrom fail, to tell
// a broken connection from a failed store. A direct receiver keeps one for
// all its frames (a new one per frame was a heap allocation per frame:
// the store takes it as an io.Reader).
type bodyReader struct {
	r   io.Reader
	v   bodyViewer // r's views, nil when r copies only
	err error
}

// bodyViewer is a direct reader's body: Read copies, View hands out the
// reader's own memory (transport.DirectReader.View, on a ConnReader
// reading ahead: Views).
type bodyViewer interface {
	io.Reader
	store.Viewer
	Views() bool
}

// newBodyReader returns the body reader of a direct receiver reading r,
// taking views when r hands them out.
func newBodyReader(r bodyViewer) bodyReader {
	br := bodyReader{r: r}
	if r.Views() {
		br.v = r
	}
	return br
}

// viewBody is a bodyReader whose bytes the store may take as views (a
// store.Viewer), instead of copying them with Read: commitlog's AppendAtFrom then
// writes the read-ahead ring's bytes to the segment file directly.
type viewBody bodyReader

var _ store.Viewer = (*viewBody)(nil)

func (b *viewBody) Read(p []byte) (int, error) { return (*bodyReader)(b).Read(p) }

// View returns the next 1..max body bytes, valid until the next read.
func (b *viewBody) View(max int) ([]byte, error) {
	v, err := b.v.View(max)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return v, err
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// bodyErr is the body read error that made an append fail: the
// connection broke, not the store.
type bodyErr struct{ error }

func (e bodyErr) Unwrap() error { return e.error }

func directAppend(app store.AppenderFrom, br *bodyReader, f *rxFrame) (int64, error) {
	br.err = nil
	var r io.Reader = br
	if br.v != nil {
		r = (*viewBody)(br)
	}
	n, err := app.AppendAtFrom(f.th.Offset, int(f.th.Size), r)
	if err != nil && br.err != nil {
		return n, bodyErr{br.err}
	}
	return n, err
}

func directRead(r io.Reader, f *rxFrame) ([]byte, error) {
	b := make([]byte, f.th.Size) // bounded by the reader's maxBody
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, bodyErr{err}
	}
	return b, nil
}

type classicDirectRx struct {
	app store.AppenderFrom
	r   *transport.DirectReader
	br  bodyReader // reads r
}

func (x *classicDirectRx) next() (rxFrame, error) {
	h, err := x.r.Next()
	return rxFrame{state: transport.StateTransfer, th: transport.TransferHeader{Offset: h.Offset, Size: int32(h.Size)}}, err
}
func (x *classicDirectRx) appendBody(_ store.Log, f *rxFrame) (int64, error) {
	return directAppend(x.app, &x.br, f)
}
func (x *classicDirectRx) readBody(f *rxFrame) ([]byte, error) {
	return directRead(x.r, f)
}

type asDirectRx struct {
	app store.AppenderFrom
	r   *transport.AutoSwitchDirectReader
	br  bodyReader // reads r
}

func (x *asDirectRx) next() (rxFrame, error) {
	f, err := x.r.Next()
	return rxFrame{state: f.State, hs: f.Handshake, th: f.Transfer}, err
}
func (x *asDirectRx) appendBody(_ store.Log, f *rxFrame) (int64, error) {
	return directAppend(x.app, &x.br, f)
}
func (x *asDirectRx) readBody(f *rxFrame) ([]byte, error) {
	return directRead(x.r, f)
}

// nextFrame reads the next frame; while the reader has nothing buffered it
// reports first (the batch received so far is applied), then waits.
func (ss *slaveSession) nextFrame(rx receiver) (rxFrame, error) {
	ss.cr.Arm()
	f, err := rx.next()
	if errors.Is(err, transport.ErrWouldBlock) {
		if err := ss.report(false); err != nil {
			return rxFrame{}, err
		}
		f, err = rx.next() // the reader disarmed itself: this one waits
	}
	ss.cr.Disarm()
	if err != nil {
		return rxFrame{}, ss.readFailed(err)
	}
	ss.frames++
	ss.s.lastFrame.Store(time.Now().UnixNano())
	return f, nil
}

// receive is the receive loop, three steps a frame: receive it, append
// its body, report.
func (ss *slaveSession) receive(rx receiver) error {
	var since int64 // bytes applied since the last report
	first := true   // the first frame of the session with a body
	as := ss.s.cfg.Protocol == ProtocolAutoSwitch
	// The frame lives in the session: a local would move to the heap
	// once per frame (the receivers take it by pointer through an
	// interface).
	f := &ss.frame
	for {
		// Receive (reporting first when nothing is buffered: nextFrame).
		var err error
		if *f, err = ss.nextFrame(rx); err != nil {
			return err
		}
		if err := ss.checkFrame(f); err != nil {
			return err
		}
		// Append (a heartbeat has no body).
		if f.th.Size == 0 {
			ss.heartbeat(f)
		} else {
			if err := ss.appendFrame(rx, f, first); err != nil {
				return err
			}
			first = false
			since += int64(f.th.Size)
		}
		// Report.
		switch {
		case f.th.Size == 0 && as:
			// An autoswitch master keeps a member in its in-sync set on
			// acks only: answer every heartbeat (the master paces them by
			// MaxTimeSlaveNotCatchup).
			err = ss.report(true)
		case since >= reportEvery:
			since = 0
			err = ss.report(false)
		}
		if err != nil {
			return err
		}
	}
}

// heartbeat takes in a frame without a body.
func (ss *slaveSession) heartbeat(f *rxFrame) {
	if ss.s.met != nil {
		ss.s.met.heartbeats.Inc()
	}
	ss.setConfirm(f.th.ConfirmOffset)
	ss.heartbeatOnly(f.th.ConfirmOffset)
}

// appendFrame appends the body of f, a checked frame with a body, through
// the receiver's body callback: after checkFirstRecord, from memory, when
// it is the session's first and must be checked as a record.
func (ss *slaveSession) appendFrame(rx receiver, f *rxFrame, first bool) error {
	s := ss.s
	var newMax int64
	var err error
	if first && ss.checkRecords() {
		var body []byte
		if body, err = rx.readBody(f); err != nil {
			return ss.readFailed(err)
		}
		if err := ss.checkFirstRecord(f.th.Offset, body); err != nil {
			return err
		}
		newMax, err = s.st.AppendAt(f.th.Offset, body)
	} else {
		newMax, err = rx.appendBody(s.st, f)
	}
	if err != nil {
		var be bodyErr
		if errors.As(err, &be) {
			return ss.readFailed(be.error)
		}
		return s.appendFailed(f.th.Offset, int(f.th.Size), err)
	}
	ss.appended = true
	if ss.hbOnly {
		ss.hbOnly = false
		s.clearUnhealthy()
		if s.met != nil {
			s.met.hbOnly.Set(0)
		}
	}
	ss.max.Store(newMax)
	s.clearSegmentError()
	ss.setConfirm(f.th.ConfirmOffset)
	if s.met != nil {
		s.met.recvBytes.Add(float64(f.th.Size))
		s.met.recvFrames.Inc()
	}
	return nil
}

// heartbeatOnly: in autoswitch a heartbeat whose confirm offset is beyond
// the local max offset says that the master holds bytes this slave lacks
// yet has nothing to send it: the slave's offset is outside the master's
// log (retention removed it). The classic protocol carries nothing that
// tells this apart from an idle master.
func (ss *slaveSession) heartbeatOnly(confirm int64) {
	s := ss.s
	if s.cfg.Protocol != ProtocolAutoSwitch || ss.hbOnly {
		return
	}
	cur := ss.max.Load()
	if confirm <= cur {
		return
	}
	ss.hbOnly = true
	s.setUnhealthy("the master sends heartbeats only although it holds data beyond this slave's offset: the offset is outside the master's log; wipe this slave's store to resync",
		"offset", cur, "master_confirm_offset", confirm)
	if s.met != nil {
		s.met.hbOnly.Set(1)
	}
}

func (ss *slaveSession) setConfirm(c int64) {
	if ss.s.cfg.Protocol == ProtocolAutoSwitch {
		ss.s.confirm.Store(min(c, ss.max.Load()))
	}
}

// checkFrame applies the per-frame rules before a body is appended: the
// state, the offset (== local max unless the log is empty), the segment
// geometry of an empty log's first frame, and the epoch (autoswitch).
func (ss *slaveSession) checkFrame(f *rxFrame) error {
	s := ss.s
	if f.state != transport.StateTransfer {
		s.log.Warn("closing master connection: state mismatch: a HANDSHAKE frame during TRANSFER", "state", f.state.String(), "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("state mismatch: %v frame during TRANSFER", f.state)}
	}
	cur := ss.max.Load()
	switch {
	case cur != 0 && f.th.Offset != cur:
		return ss.mismatch(f.th.Offset, int(f.th.Size), cur)
	case cur == 0 && f.th.Size > 0:
		if seg := s.st.Bounds().SegmentSize; seg > 0 && f.th.Offset%seg != 0 {
			return s.segmentError("first frame is not at a segment boundary of the slave: master and slave segment sizes differ; replication cannot proceed",
				fmt.Sprintf("first frame at offset %d is not a multiple of this slave's segment size %d: master and slave segment sizes differ",
					f.th.Offset, seg), "frame_offset", f.th.Offset, "slave_segment_size", seg)
		}
	}
	if s.cfg.Protocol == ProtocolAutoSwitch {
		return ss.checkEpoch(f)
	}
	return nil
}

// checkEpoch: a frame of an older epoch than the local last one is
// refused; a newer one is appended to the epoch file before its body.
func (ss *slaveSession) checkEpoch(f *rxFrame) error {
	s := ss.s
	e, start := f.th.Epoch, f.th.EpochStartOffset
	switch {
	case ss.hasEpoch && e == ss.lastEpoch:
		return nil
	case ss.hasEpoch && e < ss.lastEpoch:
		s.log.Warn("closing master connection: frame of an older epoch than the local last epoch", "frame_epoch", e,
			"local_epoch", ss.lastEpoch, "frame_offset", f.th.Offset, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("frame epoch %d older than the local epoch %d", e, ss.lastEpoch)}
	case start > f.th.Offset:
		s.log.Warn("closing master connection: frame epoch starts after the frame", "frame_epoch", e, "epoch_start", start,
			"frame_offset", f.th.Offset, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("epoch %d starts at %d, after the frame at %d", e, start, f.th.Offset)}
	}
	if err := s.cfg.Epochs.Append(e, start); err != nil {
		s.log.Warn("closing master connection: the frame's epoch cannot be appended to the epoch file", "frame_epoch", e, "epoch_start", start,
			"error", err, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("append epoch %d-%d: %w", e, start, err)}
	}
	s.log.Info("new epoch from the master", "epoch", e, "start_offset", start)
	ss.lastEpoch, ss.hasEpoch = e, true
	return nil
}

// checkRecords says whether the first body of a classic session must be
// checked as a record: the local log is not empty, ends at a record
// boundary, and the store decodes RocketMQ records.
func (ss *slaveSession) checkRecords() bool {
	s := ss.s
	if s.cfg.Protocol != ProtocolClassic || !s.boundary.Load() || ss.max.Load() == 0 {
		return false
	}
	b := s.st.Bounds()
	_, _, err := store.ScanRecords(s.st, b.Min, b.Min)
	return err == nil
}

// checkFirstRecord refuses bytes at a record boundary that do not start a
// record (a master whose log diverged from this one): the header's size
// field, magic code, and that the record fits in the segment.
func (ss *slaveSession) checkFirstRecord(off int64, body []byte) error {
	s := ss.s
	b := s.st.Bounds()
	err := firstRecordError(body, off, b.SegmentSize)
	if err == nil {
		s.clearUnhealthy()
		return nil
	}
	if !s.endsAtBoundary(off, b) {
		// The log ends inside a record (a replica's partial record): the
		// bytes continue it. Nothing to judge.
		s.boundary.Store(false)
		return nil
	}
	s.setUnhealthy("the master's bytes at this slave's max offset are not a record: the logs diverged (the master's log is not this log's continuation); not appending",
		"offset", off, "error", err, "hint", "wipe this slave's store to resync, or use --ha-protocol autoswitch, which truncates to the consistent point")
	if s.met != nil {
		s.met.diverged.Inc()
	}
	return loggedError{fmt.Errorf("diverged log at %d: %w", off, err)}
}

// endsAtBoundary confirms that the log ends at a record boundary at maxOff
// by scanning the records of its last segment (only when the first bytes
// of a connection were refused; the answer is cached per max offset).
func (s *SlaveNode) endsAtBoundary(maxOff int64, b store.Bounds) bool {
	s.mu.Lock()
	if s.bndAt == maxOff && s.bndKnown {
		v := s.bndOK
		s.mu.Unlock()
		return v
	}
	s.mu.Unlock()
	end, _, err := store.ScanRecords(s.st, max(b.Min, b.SegmentStart(maxOff)), maxOff)
	ok := err == nil && end == maxOff
	s.mu.Lock()
	s.bndAt, s.bndKnown, s.bndOK = maxOff, true, ok
	s.mu.Unlock()
	return ok
}

// firstRecordError checks the record header at the start of body, the
// bytes at offset off.
func firstRecordError(body []byte, off, segSize int64) error {
	if len(body) < 8 {
		return nil // too little to judge
	}
	total := int64(int32(binary.BigEndian.Uint32(body)))
	magic := binary.BigEndian.Uint32(body[4:])
	switch magic {
	case record.MagicCode:
		if total < record.MinRecordSize {
			return fmt.Errorf("%w: TOTALSIZE %d", record.ErrBadLength, total)
		}
	case record.BlankMagic:
		if total < record.FillerSize {
			return fmt.Errorf("%w: filler of %d bytes", record.ErrBadLength, total)
		}
	default:
		return fmt.Errorf("%w: %#08x", record.ErrBadMagic, magic)
	}
	if segSize > 0 && off%segSize+total > segSize {
		return fmt.Errorf("%w: a %d-byte record at segment position %d does not fit in a %d-byte segment", record.ErrBadLength, total, off%segSize, segSize)
	}
	if magic == record.MagicCode && int64(len(body)) >= total {
		info, err := record.VerifyHeader(body)
		if err != nil {
			return err
		}
		if info.PhysicalOffset != off {
			return fmt.Errorf("%w: PHYSICALOFFSET %d at offset %d", record.ErrBadLength, info.PhysicalOffset, off)
		}
	}
	return nil
}
