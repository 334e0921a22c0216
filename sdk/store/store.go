package store

import (
	"context"
	"errors"
	"io"

	"github.com/replicatorhq/replicator/sdk/record"
)

// Log is the byte log that replicator's core replicates: one logically
// contiguous byte sequence addressed by physical offsets, kept in
// fixed-size segments. A slave appends raw bytes shipped from its master
// at exactly its max offset; a master's connections read them back to
// ship. Core's replication (the slave side, and the master's sending
// side) needs no more than this; record boundaries are found over Read
// views with ScanRecords.
//
// All methods are safe for concurrent use. Any error other than the
// sentinels below means the log is unusable and replication stops for
// the node.
type Log interface {
	// AppendAt writes raw commit-log bytes at offset, which must equal the
	// current max offset (ErrOffsetMismatch otherwise; never a gap). On an
	// empty log it creates the segment that contains offset. The bytes must
	// not cross a segment end (ErrSegmentOverflow). Returns the new max
	// offset. The log keeps no reference to data.
	AppendAt(offset int64, data []byte) (int64, error)

	// Read returns a view of at most max stored bytes starting at offset,
	// never crossing a segment end. It may return fewer bytes than are
	// stored (a store reading over a stream hands out what one chunk
	// holds); at offset == max offset the view is empty (no error).
	// Offsets outside [min, max] give ErrOffsetOutOfRange. The caller must
	// Release the view; until then the bytes stay mapped.
	Read(offset int64, max int) (View, error)

	// Bounds reports the current offsets and geometry of the log.
	Bounds() Bounds

	// Truncate cuts the log back to offset (a record boundary at or below
	// the max offset); crash-safe: cut records never come back.
	Truncate(offset int64) error

	// Watch registers ch to receive a non-blocking send whenever the max
	// offset changes (append or truncate). Sends coalesce: give ch a buffer of
	// one. The returned function unregisters ch. Notifier implements it.
	Watch(ch chan<- struct{}) (cancel func())

	// Close flushes and releases the log. Calls after Close fail with ErrClosed.
	Close() error
}

// Messages is the message view of a commit log: what a master's put path
// and the API need, encoding messages as records at the end of the log
// and decoding them back.
type Messages interface {
	// Append encodes msg as a record and writes it at the end of the log,
	// assigning its queue offset, physical offset and store timestamp. A
	// record never spans two segments. With synchronous flushing Append waits
	// for a group commit that covers the record and returns
	// ErrFlushDiskTimeout (with a valid result: the record is stored) when it
	// does not come in time. The store keeps no reference to msg.
	Append(ctx context.Context, msg *record.Message) (AppendResult, error)

	// ReadMessages decodes up to n records starting at offset (a record
	// boundary), skipping end-of-file fillers, and returns them with the
	// offset after the last one. It stops early at the max offset or at a
	// partial record. A first position that is not a record gives
	// ErrNotBoundary; a later record that does not verify gives ErrCorrupt.
	ReadMessages(offset int64, n int) ([]record.Record, int64, error)
}

// Store is a commit log: the byte log and its message view over the same
// bytes. A store implementation (the builtin commitlog, a plugin's, the
// in-memory memstore) implements Store; core's slave side asks only for
// its Log, a master's put path and the API for its Messages too.
type Store interface {
	Log
	Messages
}

// AppenderFrom is an optional capability of a Log, found with a type
// assertion. A slave whose log implements it, on a connection with a file
// descriptor (plain TCP), hands each frame body to the log as a reader
// over the socket, instead of reading it into a buffer of its own for
// AppendAt: the log chooses where the bytes land (the commitlog store
// writes them to the segment file with pwrite, from the reader's views
// when it is a Viewer, else through a buffer it reuses).
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

// Viewer is an optional capability of the reader a slave hands to
// AppendAtFrom, found with a type assertion: when the slave's socket reads
// ahead, View returns the reader's next 1..max bytes in its own memory
// (the read-ahead ring), valid until the reader's next call, and io.EOF
// after the last. A log that takes views writes them where they lie,
// without copying them into a buffer of its own (the commitlog store
// does).
type Viewer interface {
	View(max int) ([]byte, error)
}

// AppendResult describes a record that Append stored.
type AppendResult struct {
	Offset         int64 // physical offset of the record
	NextOffset     int64 // offset just after the record (Offset + size)
	QueueOffset    int64 // logical offset within (topic, queue)
	StoreTimestamp int64 // Unix milliseconds
	Size           int32 // record size in bytes
}

// Bounds are a store's offsets and segment geometry.
type Bounds struct {
	Min              int64 // first readable offset
	Max              int64 // first offset not yet written
	Flushed          int64 // every byte below is durable
	LastSegmentStart int64 // start offset of the last (active) segment
	SegmentSize      int64 // bytes per segment file
}

// Releaser is implemented by whatever pins the memory behind a View.
type Releaser interface{ Release() }

// View is a read-only window onto stored bytes. Data is valid until Release.
type View struct {
	Offset int64  // physical offset of Data[0]
	Data   []byte // never crosses a segment end
	Ref    Releaser
}

// Release unpins the view. It is safe to call on a zero View and more than once
// only through the same copy.
func (v *View) Release() {
	if v.Ref != nil {
		v.Ref.Release()
		v.Ref = nil
	}
	v.Data = nil
}

// Sentinel errors. Implementations wrap them with context; callers check them
// with errors.Is.
var (
	ErrClosed           = errors.New("store: closed")
	ErrOffsetMismatch   = errors.New("store: offset does not match the max offset")
	ErrOffsetOutOfRange = errors.New("store: offset out of range")
	ErrSegmentOverflow  = errors.New("store: bytes cross a segment end")
	ErrNotBoundary      = errors.New("store: offset is not a record boundary")
	ErrCorrupt          = errors.New("store: corrupt commit log")
	ErrMessageTooLarge  = errors.New("store: message too large")
	ErrInvalidTopic     = errors.New("store: invalid topic")
	ErrFlushDiskTimeout = errors.New("store: flush disk timeout")
)
