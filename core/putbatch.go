package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// PutBatch appends msgs in order, then, for SyncMaster, waits once for
// slave acks covering them all (one waiter, timer and wake-up for the
// batch instead of one per message). out[i] is what Put would have
// returned for msgs[i] alone:
//   - a message whose record some quorum acked while the batch waited is
//     PUT_OK (or the store's FLUSH_DISK_TIMEOUT), even when a later one
//     timed out (FLUSH_SLAVE_TIMEOUT) or was SLAVE_NOT_AVAILABLE;
//   - ctx ending, a fence or Close while the batch waits answers the
//     records not covered yet as Put does (FLUSH_SLAVE_TIMEOUT with ctx's
//     or the fence's error; stored);
//   - a fence or Close before a message's append refuses it and the rest
//     (not stored, the fence's error or ErrClosed);
//   - an append error answers that message with it and the rest, not
//     stored, with ErrBatchAborted wrapping it; the earlier ones are stored
//     and answered as usual.
//
// The put metrics count every message as Put does.
func (m *Master) PutBatch(ctx context.Context, msgs []*record.Message) []BatchPut {
	out := make([]BatchPut, len(msgs))
	m.putBatch(ctx, msgs, out)
	return out
}

// putBatch is PutBatch into out (len(msgs)), the code of Put too.
func (m *Master) putBatch(ctx context.Context, msgs []*record.Message, out []BatchPut) {
	if len(msgs) == 0 {
		return
	}
	n := int32(len(msgs))
	m.puts.Add(n)
	defer m.puts.Add(-n)
	stored := m.appendBatch(ctx, msgs, out)
	if stored == 0 {
		return
	}
	done := out[:stored]
	switch {
	case m.fenced() != nil:
		// Fenced while appending: stored here, but a demote may cut it.
		setStatus(done, FlushSlaveTimeout, m.fenced())
	case m.cfg.Role == SyncMaster:
		m.waitSlaves(ctx, done)
	case m.cfg.MaxLag > 0:
		setStatus(done, PutOK, m.waitLag(ctx, done[len(done)-1].NextOffset))
	}
	if m.met != nil {
		// One counter update per run of equal statuses.
		for i := 0; i < len(done); {
			j := i + 1
			for j < len(done) && done[j].Status == done[i].Status {
				j++
			}
			m.met.puts.WithLabelValues(done[i].Status.String()).Add(float64(j - i))
			i = j
		}
	}
}

// appendBatch appends msgs in order until one is refused or fails, fills
// in the results of the stored ones and the errors of the others, and
// returns the number stored (a prefix of msgs).
func (m *Master) appendBatch(ctx context.Context, msgs []*record.Message, out []BatchPut) int {
	for i, msg := range msgs {
		if err := m.admit(); err != nil {
			for j := i; j < len(out); j++ {
				out[j].Err = err
			}
			return i
		}
		res, err := m.st.Append(ctx, msg)
		status := PutOK
		switch {
		case errors.Is(err, store.ErrFlushDiskTimeout):
			status = FlushDiskTimeout
		case err != nil:
			err = fmt.Errorf("replicator: master append: %w", err)
			out[i].Err = err
			for j := i + 1; j < len(out); j++ {
				out[j].Err = fmt.Errorf("%w: %w", ErrBatchAborted, err)
			}
			return i
		}
		out[i].PutResult = PutResult{Status: status, Offset: res.Offset, NextOffset: res.NextOffset, QueueOffset: res.QueueOffset}
	}
	return len(msgs)
}

// admit is the check before each append: the fence's error once fenced,
// ErrClosed once closing.
func (m *Master) admit() error {
	if err := m.fenced(); err != nil {
		return err
	}
	select {
	case <-m.closing:
		return ErrClosed
	default:
		return nil
	}
}
