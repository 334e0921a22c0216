package core

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// handshake is the autoswitch slave's HANDSHAKE state: send the 16-byte
// handshake, read the master's, compute the consistent point and truncate
// the log and the epoch file to it.
func (ss *slaveSession) handshake(rx receiver) error {
	s := ss.s
	s.setState(transport.StateHandshake)
	hs := transport.AppendSlaveHandshake(nil, transport.SlaveHandshake{
		SyncFromLastFile: s.cfg.SyncFromLastFile, AsyncLearner: s.cfg.AsyncLearner, BrokerID: s.cfg.BrokerID})
	if _, err := ss.conn.Write(hs); err != nil {
		return fmt.Errorf("write handshake: %w", err)
	}
	ss.cr.Disarm()
	f, err := rx.next()
	if err != nil {
		return ss.readFailed(err)
	}
	ss.frames++
	s.lastFrame.Store(time.Now().UnixNano())
	if f.state != transport.StateHandshake {
		s.log.Warn("closing master connection: state mismatch: expected the master's HANDSHAKE", "state", f.state.String(), "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("state mismatch: %v frame during HANDSHAKE", f.state)}
	}
	master := epochsOf(f.hs.Epochs)
	b := s.st.Bounds()
	local := s.cfg.Epochs.Entries()
	if len(local) > 0 && b.Max <= b.Min {
		// Entries over an empty log cover no byte (a replica that learned
		// an epoch and never got its data): a new replica.
		if err := s.cfg.Epochs.TruncateSuffixByOffset(0); err != nil {
			return fmt.Errorf("%w: %w", errStopped, err)
		}
		local = nil
	}
	if len(local) == 0 {
		if b.Max > b.Min {
			// A log with data but no epoch history cannot be compared with
			// the master's: refuse rather than trust it blindly.
			return ss.refuse("the local commit log holds data but the epoch file is empty: it cannot be checked against the master's epochs; not replicating",
				"local_min", b.Min, "local_max", b.Max, "hint", "move the data directory away to resync from the master")
		}
		// A new replica: nothing to truncate.
		ss.max.Store(b.Max)
		s.clearUnhealthy()
		s.log.Info("handshake done: new replica", "master_max", f.hs.MaxOffset, "master_epoch", f.hs.LastEpoch, "master_entries", len(master))
		return nil
	}
	cp := epoch.ConsistentPoint(epoch.WithEnd(local, b.Max), epoch.WithEnd(master, f.hs.MaxOffset))
	if cp < 0 {
		return ss.refuse("no consistent point with the master: no local epoch matches the master's; not replicating",
			"local_epochs", len(local), "local_last_epoch", local[len(local)-1].Epoch, "master_last_epoch", f.hs.LastEpoch,
			"master_epochs", len(master), "local_max", b.Max, "master_max", f.hs.MaxOffset)
	}
	if err := ss.truncate(cp, b); err != nil {
		return err
	}
	last, ok := s.cfg.Epochs.Last()
	ss.lastEpoch, ss.hasEpoch = last.Epoch, ok
	ss.max.Store(s.st.Bounds().Max)
	s.clearUnhealthy()
	s.log.Info("handshake done", "consistent_point", cp, "max_offset", ss.max.Load(), "master_max", f.hs.MaxOffset,
		"master_epoch", f.hs.LastEpoch, "local_epoch", last.Epoch)
	return nil
}

// refuse ends the handshake: unhealthy status, one ERROR line per change,
// a metric; the client retries after ReconnectDelay and appends nothing.
func (ss *slaveSession) refuse(reason string, args ...any) error {
	s := ss.s
	s.setUnhealthy(reason, args...)
	if s.met != nil {
		s.met.noConsistent.Inc()
	}
	return loggedError{errors.New(reason)}
}

// truncate cuts the log (and first the epoch file) to cp, or to the last
// record boundary below it when cp is not one.
func (ss *slaveSession) truncate(cp int64, b store.Bounds) error {
	s := ss.s
	if cp >= b.Max {
		// Nothing to cut; drop epoch entries starting at or after the
		// point (they cover no local byte).
		if err := s.cfg.Epochs.TruncateSuffixByOffset(cp + 1); err != nil {
			return fmt.Errorf("%w: %w", errStopped, err)
		}
		return nil
	}
	cut := cp
	recs, err := countRecords(s.st, cut, b.Max)
	if errors.Is(err, store.ErrNotBoundary) {
		if cut, err = lastBoundaryBelow(s.st, cp, b); err != nil {
			return ss.refuse("the consistent point is not a record boundary and no boundary below it was found; not replicating",
				"consistent_point", cp, "error", err)
		}
		s.log.Warn("the consistent point is not a record boundary: cutting to the last record boundary below it", "consistent_point", cp, "cut", cut)
		recs, err = countRecords(s.st, cut, b.Max)
	}
	if err != nil {
		s.log.Warn("counting the records to cut failed", "from", cut, "to", b.Max, "error", err)
		recs = -1
	}
	// The epoch file first: after a crash between the two steps the log's
	// tail is covered by an older entry, and the next handshake cuts again.
	if err := s.cfg.Epochs.TruncateSuffixByOffset(cut); err != nil {
		return fmt.Errorf("%w: truncate the epoch file to %d: %w", errStopped, cut, err)
	}
	if err := s.st.Truncate(cut); err != nil {
		return fmt.Errorf("%w: truncate the log to %d: %w", errStopped, cut, err)
	}
	n := b.Max - cut
	s.log.Warn("truncated the commit log to the consistent point with the master: these bytes were never confirmed by the new master",
		"from", b.Max, "to", cut, "bytes", n, "records", recs)
	if s.met != nil {
		s.met.truncated.Add(float64(n))
	}
	s.mu.Lock()
	s.status.Truncated = &Truncation{From: b.Max, To: cut, Bytes: n, Records: recs, Time: time.Now()}
	s.mu.Unlock()
	s.boundary.Store(true)
	return nil
}

// countRecords counts the records in [from, to); from must be a record
// boundary (store.ErrNotBoundary otherwise).
func countRecords(st store.Log, from, to int64) (int, error) {
	_, n, err := store.ScanRecords(st, from, to)
	return n, err
}

// lastBoundaryBelow scans the segment holding cp from its start (a record
// boundary) for the last record boundary <= cp.
func lastBoundaryBelow(st store.Log, cp int64, b store.Bounds) (int64, error) {
	last, _, err := store.ScanRecords(st, max(b.Min, b.SegmentStart(cp)), cp)
	return last, err
}

// isReset reports a connection reset or closed by the peer.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe)
}
