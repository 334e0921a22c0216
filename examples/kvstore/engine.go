package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// The log encoding: one RocketMQ message per write, in topic Topic, with the
// operation in the TAGS property, the key in the KEYS property and the value
// as the body. Messages of other topics in the same log are ignored.
const (
	Topic    = "kvstore"
	OpPut    = "PUT"
	OpDelete = "DELETE"

	propTags = "TAGS" // RocketMQ's MessageConst.PROPERTY_TAGS
	propKeys = "KEYS" // RocketMQ's MessageConst.PROPERTY_KEYS

	// MaxValueSize bounds a value (the commit log's own bound is 4 MiB per record).
	MaxValueSize = 1 << 20
	// applyBatch is how many records one ReadMessages call decodes.
	applyBatch = 256
)

// keyRE is the key syntax: short, printable, safe in a URL path and in a
// RocketMQ property value (no \x01, \x02 or space).
var keyRE = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// ErrInvalidKey is returned for a key outside keyRE.
var ErrInvalidKey = errors.New("kvstore: invalid key (want 1-128 of [A-Za-z0-9._:@-])")

// ErrValueTooLarge is returned for a value above MaxValueSize.
var ErrValueTooLarge = fmt.Errorf("kvstore: value larger than %d bytes", MaxValueSize)

// Encode turns a write into the message the master appends.
func Encode(op, key string, value []byte) (*record.Message, error) {
	if !keyRE.MatchString(key) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	if len(value) > MaxValueSize {
		return nil, ErrValueTooLarge
	}
	if op == OpDelete {
		value = nil
	}
	return &record.Message{
		Topic:      Topic,
		Body:       value,
		Properties: map[string]string{propTags: op, propKeys: key},
	}, nil
}

// Engine is the key-value state: a map folded from the commit log, record
// by record, in log order. The leader and the follower run the same engine
// over their own copy of the log, so they hold the same state once their
// logs hold the same bytes, and a restart rebuilds it by replaying the log.
type Engine struct {
	st  store.Store
	log hclog.Logger

	mu      sync.Mutex
	data    map[string][]byte
	applied int64 // every record below this offset is in data
	records int64 // kvstore records applied since the process started
}

// NewEngine returns an engine over st that has applied nothing yet.
func NewEngine(st store.Store, log hclog.Logger) *Engine {
	b := st.Bounds()
	return &Engine{st: st, log: log, data: map[string][]byte{}, applied: b.Min}
}

// CatchUp applies every whole record the store holds beyond what is
// applied. Reads call it first, so a read sees every write the node's log
// holds at that moment (on a follower fed by a sync leader: every write the
// leader acknowledged with PUT_OK).
func (e *Engine) CatchUp() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		b := e.st.Bounds()
		if e.applied < b.Min {
			// A follower that started empty gets its first segment from
			// the leader: the log then starts there.
			e.applied = b.Min
		}
		if e.applied >= b.Max {
			return nil
		}
		recs, next, err := e.st.ReadMessages(e.applied, applyBatch)
		if err != nil {
			return fmt.Errorf("kvstore: apply at offset %d: %w", e.applied, err)
		}
		for i := range recs {
			e.apply(&recs[i])
		}
		if next == e.applied {
			return nil // the log ends inside a record still being replicated
		}
		e.applied = next
	}
}

func (e *Engine) apply(r *record.Record) {
	if r.Topic != Topic {
		return
	}
	key := r.Properties[propKeys]
	switch r.Properties[propTags] {
	case OpPut:
		e.data[key] = r.Body
	case OpDelete:
		delete(e.data, key)
	default:
		e.log.Warn("skipping a kvstore record with an unknown operation", "offset", r.PhysicalOffset, "op", r.Properties[propTags])
		return
	}
	e.records++
}

// Get returns the value of key after catching up with the log.
func (e *Engine) Get(key string) ([]byte, bool, error) {
	if err := e.CatchUp(); err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.data[key]
	return v, ok, nil
}

// Stats is a snapshot of the engine.
type Stats struct {
	Keys          int   `json:"keys"`
	AppliedOffset int64 `json:"applied_offset"`
	Records       int64 `json:"records_applied"`
}

// Stats returns the engine's counters after catching up with the log.
func (e *Engine) Stats() (Stats, error) {
	err := e.CatchUp()
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Keys: len(e.data), AppliedOffset: e.applied, Records: e.records}, err
}

// Run applies new records as the log grows until ctx ends.
func (e *Engine) Run(ctx context.Context) {
	ch := make(chan struct{}, 1)
	cancel := e.st.Watch(ch)
	defer cancel()
	for {
		if err := e.CatchUp(); err != nil {
			e.log.Error("applying the log failed; reads retry it", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
