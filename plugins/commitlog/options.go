package commitlog

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/sdk/record"
)

// FlushMode says when appended bytes are made durable.
type FlushMode int

const (
	// FlushAsync flushes in the background every FlushInterval; Append
	// returns once the record is in the page cache (RocketMQ ASYNC_FLUSH).
	FlushAsync FlushMode = iota
	// FlushSync makes Append wait for a group commit (one msync covering
	// every record appended so far) or SyncFlushTimeout (RocketMQ SYNC_FLUSH).
	FlushSync
)

func (m FlushMode) String() string {
	switch m {
	case FlushAsync:
		return "async"
	case FlushSync:
		return "sync"
	}
	return fmt.Sprintf("FlushMode(%d)", int(m))
}

// Defaults (RocketMQ's MessageStoreConfig where it has one).
const (
	DefaultSegmentSize       = 1 << 30 // mappedFileSizeCommitLog
	DefaultMaxMessageSize    = 4 << 20 // maxMessageSize
	DefaultFlushInterval     = 500 * time.Millisecond
	DefaultSyncFlushTimeout  = 5 * time.Second // syncFlushTimeout
	DefaultRetentionInterval = 10 * time.Second
	// MinSegmentSize is the smallest segment size Open accepts (tests).
	MinSegmentSize = 4096
)

// Options configure a Log. Start from DefaultOptions.
type Options struct {
	// SegmentSize is the length of every segment file, at least
	// MinSegmentSize and a multiple of the OS page size. All segments of an
	// existing log must have this size.
	SegmentSize int64
	// MaxMessageSize bounds a record's TOTALSIZE; larger messages are
	// refused with store.ErrMessageTooLarge. The effective bound is also at
	// most SegmentSize-8, so that a record and a filler fit a segment.
	MaxMessageSize int
	// FlushMode is FlushAsync (default) or FlushSync.
	FlushMode FlushMode
	// FlushInterval is the background flush period in async mode and the
	// checkpoint period in both modes.
	FlushInterval time.Duration
	// SyncFlushTimeout bounds Append's wait for a group commit in sync mode;
	// past it Append returns its result with store.ErrFlushDiskTimeout.
	SyncFlushTimeout time.Duration
	// RetentionAge deletes sealed segments last written longer ago than
	// this (0 keeps them). RetentionBytes deletes the oldest sealed
	// segments while the log's files total more than this (0: no limit).
	// Neither deletes the active segment or a segment with a live View.
	RetentionAge   time.Duration
	RetentionBytes int64
	// RetentionInterval is how often retention and memory trimming run.
	RetentionInterval time.Duration
	// Preallocate creates the next segment in the background while the
	// active one fills (RocketMQ's AllocateMappedFileService).
	Preallocate bool
	// Prefault populates the pages of the active and the preallocated
	// segment up to 64 MiB ahead of Append (madvise MADV_POPULATE_WRITE,
	// else touching each page of a new segment), so appends do not take
	// page faults. Replicated appends write with pwrite and need none of
	// it: a replica populates nothing.
	Prefault bool
	// Logger receives recovery, truncation and retention events; nil = none.
	Logger hclog.Logger
	// Registerer receives the metrics; nil = none. Logs on one registry
	// share the series (counters sum; see metrics); the last Close
	// unregisters them.
	Registerer prometheus.Registerer
	// Now is the clock for store timestamps and retention ages; nil = time.Now.
	Now func() time.Time
	// PrefaultAhead bounds how far past the max offset Prefault
	// populates pages (0: 64 MiB).
	PrefaultAhead int64
	// FS is the file system the log's files live on; nil is vfs.Default,
	// the operating system's. Fault tests give an errorfs wrapper.
	FS vfs.FS
}

// DefaultOptions returns RocketMQ's defaults: 1 GiB segments, 4 MiB
// messages, async flush every 500 ms, 5 s sync-flush timeout, no
// retention, preallocation and prefaulting on.
func DefaultOptions() Options {
	return Options{
		SegmentSize:       DefaultSegmentSize,
		MaxMessageSize:    DefaultMaxMessageSize,
		FlushMode:         FlushAsync,
		FlushInterval:     DefaultFlushInterval,
		SyncFlushTimeout:  DefaultSyncFlushTimeout,
		RetentionInterval: DefaultRetentionInterval,
		Preallocate:       true,
		Prefault:          true,
	}
}

// Validate reports the first invalid option.
func (o *Options) Validate() error {
	switch {
	case o.SegmentSize < MinSegmentSize || o.SegmentSize%pageSize != 0:
		return fmt.Errorf("commitlog: SegmentSize %d: need a multiple of %d, at least %d", o.SegmentSize, pageSize, MinSegmentSize)
	case o.SegmentSize > 1<<40:
		return fmt.Errorf("commitlog: SegmentSize %d above 1 TiB", o.SegmentSize)
	case o.MaxMessageSize < record.MinRecordSize:
		return fmt.Errorf("commitlog: MaxMessageSize %d below the smallest record (%d)", o.MaxMessageSize, record.MinRecordSize)
	case o.FlushMode != FlushAsync && o.FlushMode != FlushSync:
		return fmt.Errorf("commitlog: unknown %v", o.FlushMode)
	case o.FlushInterval <= 0:
		return fmt.Errorf("commitlog: FlushInterval %v must be positive", o.FlushInterval)
	case o.SyncFlushTimeout <= 0:
		return fmt.Errorf("commitlog: SyncFlushTimeout %v must be positive", o.SyncFlushTimeout)
	case o.RetentionAge < 0 || o.RetentionBytes < 0:
		return fmt.Errorf("commitlog: negative retention")
	case o.PrefaultAhead < 0:
		return fmt.Errorf("commitlog: PrefaultAhead %d is negative", o.PrefaultAhead)
	case o.RetentionInterval <= 0:
		return fmt.Errorf("commitlog: RetentionInterval %v must be positive", o.RetentionInterval)
	}
	return nil
}

// maxRecord is the effective record size bound.
func (o *Options) maxRecord() int {
	return int(min(int64(o.MaxMessageSize), o.SegmentSize-record.FillerSize))
}
