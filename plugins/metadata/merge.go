package metadata

import (
	"encoding/json"
	"fmt"

	"github.com/replicatorhq/replicator/sdk/meta"
)

// MergeFunc combines the local body of a document with the master's body
// into the body to apply. local is nil when the slave has no such document.
// Both bodies are JSON objects without "dataVersion". An error means the
// master's body is unusable; the round fails and nothing is applied.
type MergeFunc func(local, master json.RawMessage) (json.RawMessage, error)

// DefaultMerge returns the merges RocketMQ's slave does: consumer offsets
// are merged (MergeConsumerOffsets); every other document is replaced.
func DefaultMerge() map[string]MergeFunc {
	return map[string]MergeFunc{ConsumerOffsetName: MergeConsumerOffsets}
}

const offsetTableKey = "offsetTable"

// MergeConsumerOffsets is RocketMQ's slave rule for consumerOffset.json
// ("never deleted, always taken"): the result is the master's body whose
// "offsetTable" ({"topic@group": {queueId: offset}}) is the local table with
// every entry of the master's table put into it, as RocketMQ's
// offsetTable.putAll: a key the master has replaces the local value whole;
// a key only the slave has stays. A master table that is not an object of
// {queueId: offset} objects is an error wrapping ErrInvalidDocument (null
// counts as empty); a malformed local table is ignored.
func MergeConsumerOffsets(local, master json.RawMessage) (json.RawMessage, error) {
	mm, err := objectMembers(master)
	if err != nil {
		return nil, fmt.Errorf("master %s: %w", ConsumerOffsetName, err)
	}
	merged := map[string]json.RawMessage{}
	if local != nil {
		if lm, err := objectMembers(local); err == nil {
			for _, m := range lm {
				if m.key == offsetTableKey {
					var t map[string]json.RawMessage
					if json.Unmarshal(m.raw, &t) == nil {
						merged = t
						if merged == nil {
							merged = map[string]json.RawMessage{}
						}
					}
				}
			}
		}
	}
	at := -1
	for i, m := range mm {
		if m.key != offsetTableKey {
			continue
		}
		var t map[string]json.RawMessage
		if err := json.Unmarshal(m.raw, &t); err != nil {
			return nil, fmt.Errorf("%w: master %s: offsetTable: %v", meta.ErrInvalidDocument, ConsumerOffsetName, err)
		}
		for k, v := range t {
			var queues map[string]int64
			if err := json.Unmarshal(v, &queues); err != nil {
				return nil, fmt.Errorf("%w: master %s: offsetTable[%q] is not {queueId: offset}: %v", meta.ErrInvalidDocument, ConsumerOffsetName, truncate(k), err)
			}
			merged[k] = v
		}
		at = i
	}
	table, err := json.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: offsetTable: %v", meta.ErrInvalidDocument, ConsumerOffsetName, err)
	}
	if at < 0 {
		mm = append(mm, member{key: offsetTableKey, raw: table})
	} else {
		mm[at].raw = table
		// Drop duplicate offsetTable members but the one updated.
		out := mm[:0]
		for i, m := range mm {
			if m.key != offsetTableKey || i == at {
				out = append(out, m)
			}
		}
		mm = out
	}
	return buildObject(mm, len(master)+len(table)), nil
}
