package storeplugin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// Host-encoded appends: when the plugin shares its files and takes host
// writes (SegmentFiles without NoHostWrites), a master's Append does what
// a slave's in-place AppendAt does. The host encodes the record itself
// (sdk/record, RocketMQ's v1 format: the format the shared files hold by
// contract) at the max offset, with the next queue offset of its (topic,
// queue), writes it into the segment file, and returns; the plugin adopts
// the bytes in order on the append stream (an InPlace op: its AppendAt,
// which parses the records and keeps its queue offsets, as it must for a
// replica anyway). A producer then waits for no round trip to the plugin.
//
// The host only does this when it knows everything the store would decide:
//   - the next queue offset of the (topic, queue): learned from the
//     store's own answer to an earlier Append of that queue (the first
//     Append of each queue after an open, a Truncate or a raw AppendAt goes
//     to the plugin);
//   - that no Append sent to the plugin awaits its answer (its record's
//     offset is not known yet);
//   - that the record fits in the current segment, which exists, with room
//     for an end-of-file filler (else the store rolls the segment itself);
//   - that the record is no larger than the store's max_message_size
//     option (4 MiB when not given) and valid for the codec (else the store
//     gives its own error);
//   - that the store does not flush synchronously (sync_flush=true: the
//     producer must wait for the store's group commit).
//
// Otherwise Append goes to the plugin as before. A batch that fails as a
// whole (the plugin is gone) turns host-encoded appends off for good.

// defaultMaxRecord is the record size limit assumed when the store's
// max_message_size option is not given (RocketMQ's maxMessageSize).
const defaultMaxRecord = 4 << 20

type queueKey struct {
	topic string
	queue int32
}

// hostAppendConfig reads what host-encoded appends need from the open
// request.
func hostAppendConfig(req OpenRequest) (enabled bool, maxRecord int) {
	if v, err := strconv.ParseBool(req.Options["sync_flush"]); err == nil && v {
		return false, 0
	}
	maxRecord = defaultMaxRecord
	if v, err := strconv.ParseInt(req.Options["max_message_size"], 10, 64); err == nil && v > 0 {
		maxRecord = int(min(v, record.MaxRecordSize))
	}
	return true, maxRecord
}

// appendEncoded is Append's fast path; done=false means "send it to the
// plugin" (the caller then does so without releasing wmu, which it holds).
func (c *Client) appendEncoded(ctx context.Context, msg *record.Message) (res store.AppendResult, done bool, err error) {
	if err := c.asyncFailure(); err != nil {
		return res, true, err
	}
	key := queueKey{msg.Topic, msg.QueueID}
	c.mu.Lock()
	acked := c.bounds
	proj := max(c.proj, acked.Max)
	qo, known := c.queues[key]
	usable := c.hostAppends && c.pendingSlow == 0
	c.mu.Unlock()
	seg := acked.SegmentSize
	if !usable || !known || seg <= 0 {
		return res, false, nil
	}
	size, err := record.Size(msg)
	if err != nil || size > c.maxRecord {
		return res, false, nil // the store answers with its own error
	}
	base := segmentBase(proj, acked)
	if base > acked.LastSegmentStart || acked.Max <= base || proj-base+int64(size)+record.FillerSize > seg {
		return res, false, nil
	}
	if err := ctx.Err(); err != nil {
		return res, true, err
	}
	f, err := c.writeFile(base)
	if err != nil {
		return res, false, nil
	}
	ts := time.Now().UnixMilli()
	buf, err := record.Encode(c.encBuf[:0], msg, qo, proj, ts)
	if err != nil {
		return res, false, nil
	}
	c.encBuf = buf
	if _, err := f.WriteAt(buf, proj-base); err != nil {
		return res, true, fmt.Errorf("storeplugin: append at %d: %w", proj, err)
	}
	op := &pendingOp{
		op:    &storev1.AppendOp{Op: &storev1.AppendOp_InPlace{InPlace: &storev1.InPlace{Offset: proj, Length: int64(size)}}},
		size:  32,
		async: c.inPlaceDone,
	}
	if err := c.app.enqueue(op); err != nil {
		return res, true, err
	}
	next := proj + int64(size)
	c.mu.Lock()
	c.proj = next
	c.queues[key] = qo + 1
	c.mu.Unlock()
	c.hostAppended.Add(1)
	c.watch.Notify()
	return store.AppendResult{Offset: proj, NextOffset: next, QueueOffset: qo, StoreTimestamp: ts, Size: int32(size)}, true, nil
}

// slowAppendDone is the hook of an Append sent to the plugin while
// host-encoded appends are on: it learns the queue offset from the answer.
func (c *Client) slowAppendDone(key queueKey) func(opDone) {
	return func(d opDone) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.pendingSlow--
		switch {
		case d.err != nil:
			if c.hostAppends {
				c.hostAppends = false // what the plugin stored is unknown
				c.log.Warn("host-encoded appends turned off: an append batch failed", "error", d.err)
			}
		case d.res.Error == nil && d.res.Result != nil:
			if v := d.res.Result.QueueOffset + 1; v > c.queues[key] {
				c.queues[key] = v
			}
		}
	}
}

// forgetQueues drops the learned queue offsets (Truncate, raw AppendAt).
func (c *Client) forgetQueues() {
	c.mu.Lock()
	clear(c.queues)
	c.mu.Unlock()
}
