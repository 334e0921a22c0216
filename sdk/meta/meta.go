package meta

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"time"
)

// DataVersion is RocketMQ's DataVersion: the version of one metadata
// document. The zero value is the version of a document that never had one
// (a RocketMQ 4.x consumerOffset.json).
type DataVersion struct {
	// StateVersion is 0, or the master epoch in RocketMQ's controller mode.
	StateVersion int64 `json:"stateVersion"`
	// Timestamp is the time of the last change in Unix milliseconds.
	Timestamp int64 `json:"timestamp"`
	// Counter counts changes; it starts at 0.
	Counter int64 `json:"counter"`
}

// Next returns the version after v, as RocketMQ's nextVersion: Timestamp
// becomes now (Unix milliseconds) and Counter is incremented.
func (v DataVersion) Next(now time.Time) DataVersion {
	return DataVersion{StateVersion: v.StateVersion, Timestamp: now.UnixMilli(), Counter: v.Counter + 1}
}

// Equal reports whether all three fields are equal (RocketMQ's equals).
func (v DataVersion) Equal(o DataVersion) bool { return v == o }

// Compare orders versions as RocketMQ's compare: by StateVersion, then
// Counter, then Timestamp. It returns -1, 0 or +1.
func (v DataVersion) Compare(o DataVersion) int {
	if c := cmp.Compare(v.StateVersion, o.StateVersion); c != 0 {
		return c
	}
	if c := cmp.Compare(v.Counter, o.Counter); c != 0 {
		return c
	}
	return cmp.Compare(v.Timestamp, o.Timestamp)
}

// Document is one named metadata document.
type Document struct {
	// Name is the document's name, which is also its file name in the
	// builtin store. REQUIRED.
	Name string
	// Version is the document's DataVersion.
	Version DataVersion
	// Body is the document: a JSON object without a "dataVersion" member.
	// REQUIRED. Owned by whoever holds the Document; implementations copy
	// what they keep.
	Body json.RawMessage
}

// Entry names a document and its version, as listed by a Source.
type Entry struct {
	Name    string      `json:"name"`
	Version DataVersion `json:"dataVersion"`
}

// Source is where metadata comes from: a local store, or a master reached
// over HTTP or RocketMQ remoting.
//
// Methods are safe for concurrent use. A ctx ends the call early with its
// error. Errors other than ErrNotFound from Get mean the source is
// unavailable or broken right now; a syncer retries at its next tick.
type Source interface {
	// List returns every document's name and version, sorted by name.
	List(ctx context.Context) ([]Entry, error)
	// Get returns one document (ErrNotFound when absent). The caller owns
	// the returned Body.
	Get(ctx context.Context, name string) (Document, error)
}

// Sink is where a slave puts the metadata it copied.
type Sink interface {
	// Apply stores every document in docs with its Version as given (no
	// bump), replacing documents of the same names, all or nothing: after
	// an error, and after a crash at any point, either all of docs or none
	// of them are visible. An empty docs is a no-op. Apply keeps no
	// reference to docs. It is idempotent.
	Apply(ctx context.Context, docs []Document) error
}

// Store is a metadata document store: what a node serves (read-write on a
// master) and syncs into (a slave), and what a metadata plugin
// implements. Methods are safe for concurrent use.
type Store interface {
	Source
	Sink
	// Put stores body (a JSON object; a "dataVersion" member in it is
	// dropped) as the document name and bumps its version: the new
	// version is the old one's Next, or the zero version's for a new
	// document. It returns the stored document.
	Put(ctx context.Context, name string, body json.RawMessage) (Document, error)
	// Close releases the store; later calls fail with ErrClosed.
	Close() error
}

// Deleter is a store that can remove documents, beside Store (the builtin
// store is one). The HTTP API serves DELETE with it, and a slave's syncer
// whose local store is one deletes the documents the master no longer has.
type Deleter interface {
	// Delete removes the document name durably, or fails with ErrNotFound
	// (nothing changed).
	Delete(ctx context.Context, name string) error
}

// Errors. They are wrapped with context; check them with errors.Is.
var (
	// ErrNotFound: no document of that name.
	ErrNotFound = errors.New("metadata: document not found")
	// ErrInvalidName: the name cannot name a document (the builtin
	// store's rules: plugins/metadata.ValidateName).
	ErrInvalidName = errors.New("metadata: invalid document name")
	// ErrInvalidDocument: the bytes are not a JSON object, or their
	// "dataVersion" member is not a DataVersion.
	ErrInvalidDocument = errors.New("metadata: invalid document")
	// ErrTooLarge: a document or an answer is over its size bound.
	ErrTooLarge = errors.New("metadata: document too large")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("metadata: closed")
)
