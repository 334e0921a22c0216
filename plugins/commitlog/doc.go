// Package commitlog is replicator's default store: RocketMQ's CommitLog on
// mmap'd segment files, byte-identical to what a RocketMQ broker writes, so
// a Java slave can replicate from it and it can replicate from a Java
// master. *Log implements store.Store. It and its file-system seam
// (plugins/commitlog/vfs) are the only packages that import
// github.com/edsrzf/mmap-go.
//
// # Layout
//
//	DATA/                               RocketMQ's storePathRootDir
//	  commitlog/                        only whole segment files, at every moment
//	    00000000000000000000            segment: start offset, 20 zero-padded digits
//	    00000000001073741824            next segment (start + SegmentSize)
//	  commitlog.alloc/                  while open: segments being created
//	    00000000002147483648.spare      the preallocated next segment
//	  commitlog.checkpoint              flushed offset + queue table (see checkpoint.go)
//	  abort                             while open (RocketMQ's: a crash leaves it)
//
// Every segment is SegmentSize bytes (default 1 GiB; any page multiple down
// to 4 KiB for tests), created at full length with fallocate (so a full
// disk is an error at creation, never a SIGBUS on write) and mapped
// read-write, MAP_SHARED. Segment starts are multiples of SegmentSize and
// consecutive. The log's min offset is the first segment's start; its max
// offset is where the next byte goes. The segment size is the log's: Open
// with another one fails with ErrSegmentSizeMismatch, naming the size the
// files have.
//
// A segment file is created in commitlog.alloc (open, fallocate, mmap)
// and renamed into commitlog/ once whole, so commitlog/ never holds a
// partial, zero-length or temporary file, which a RocketMQ 4.9 broker
// refuses to load (MappedFileQueue.load maps every file of the directory
// as a segment and parses its name as the offset). Open removes what a
// crash left in commitlog.alloc and Close removes the directory. A
// segment renamed into place but not yet written (a crash right after a
// roll) is zero-filled: recovery removes a zero-filled tail, as it does
// for the next files a crashed broker had preallocated under their real
// names. When commitlog/ is on another file system than DATA (a mount
// point or a symlink), a rename between them is impossible: segments are
// then created in place, without a spare, and a warning says so.
//
// # RocketMQ's files
//
// A RocketMQ 4.9 store root also holds checkpoint, abort, lock, config/,
// consumequeue/ and index/. Open ignores them except as follows, and a
// broker can open a directory replicator wrote (see
// docs/on-disk-format.md):
//
//   - abort: created at Open (holding "replicator commitlog\n") and
//     deleted by a clean Close, as a broker does at start and clean
//     shutdown, so a broker started after a crash of this process recovers
//     the store as abnormally shut down. An empty abort is a broker's: it
//     is kept (the broker's consume queues and index still need its
//     abnormal recovery).
//   - checkpoint: the broker's StoreCheckpoint (a 4 KiB page of
//     timestamps of its consume queues and index), never written or read
//     here; replicator's own is commitlog.checkpoint. When the broker's
//     checkpoint, or an abort file of a broker, is newer than
//     commitlog.checkpoint, a broker used the directory since: Open
//     recovers as without a checkpoint (the broker may have appended
//     after replicator's clean end, or cut a torn tail).
//   - consumequeue/, index/, config/ and lock are neither read nor
//     changed by this package.
//
// # Records and the end-of-file filler
//
// Records are RocketMQ message format v1; the byte diagram is in package
// sdk/record. A record never spans two segments: when a record plus 8 bytes
// does not fit the rest of the active segment, Append writes the filler and
// counts the rest of the segment as written:
//
//	 segment k                                               segment k+1
//	+--------+--------+-----+--------------------------+-----+---------+----
//	| record | record | ... | rem int32 | 0xCBD43194   | 0 … |  record | ...
//	+--------+--------+-----+--------------------------+-----+---------+----
//	                        ^ filler: rem = bytes from here to the segment end
//
// Replication ships the filler and the zero padding verbatim, so a replica's
// segment fills at the same point. Read never returns bytes across a
// segment end.
//
// # Master and replica
//
// Append (master) encodes straight into the mapping under the put lock,
// assigns the queue offset per (topic, queue) and the physical offset, and
// refuses bad input (store.ErrInvalidTopic, store.ErrMessageTooLarge,
// record.ErrInvalidProperty) before writing a byte. AppendAt (replica)
// writes raw bytes (pwrite into the segment file, which the mapping shares
// through the page cache) at exactly the max offset (store.ErrOffsetMismatch
// otherwise), never across a segment end (store.ErrSegmentOverflow); on an
// empty log the offset must be a segment boundary and that segment is
// created. Chunks may end inside a record; a dispatch cursor follows the
// last whole record and keeps the queue table current, so a replica can be
// promoted (Append refuses while the log ends inside a partial record).
// AppendAtFrom dispatches the records of the bytes it received while they
// are still in its read buffer (user memory), keeping the part of a record
// a frame ended with for the next one (inline dispatch); what it leaves
// (AppendAt's bytes, a record larger than the 1 MiB buffer) is dispatched
// by a dispatcher goroutine that reads the mapping, woken once the cursor
// trails the max offset by 256 KiB. Append (promotion), Truncate and Close
// drain what is left first, and a checkpoint written meanwhile holds the
// cursor, from which recovery verifies the records as after any crash.
//
// # Reads
//
// Read returns a View aliasing the mapping, without copying or allocating.
// Each segment is reference counted: the log holds one reference, each View
// one more; the last Release unmaps. A segment removed by Truncate or by
// retention therefore stays mapped until its Views are released, and
// retention never removes a segment a View pins. Bytes at or past a
// truncation point read as zeros in a View taken before the Truncate.
//
// # Flushing
//
//   - FlushAsync: a flusher msyncs [flushed, max) every FlushInterval
//     (500 ms); Append returns once the record is in the page cache.
//   - FlushSync: Append kicks the flusher and waits; one msync per dirty
//     segment covers every record appended so far (group commit), and all
//     waiters it covers return together. Past SyncFlushTimeout (5 s) Append
//     returns its valid result with store.ErrFlushDiskTimeout (RocketMQ's
//     FLUSH_DISK_TIMEOUT); a cancelled ctx does the same, wrapping ctx.Err().
//
// Every FlushInterval, in both modes, the flusher writes the checkpoint
// (tmp file, fsync, rename, directory fsync) and drops the page-table
// entries of sealed, flushed segments (madvise MADV_DONTNEED), so the
// resident set is the active segment, the preallocated next one, and what
// readers touch, not the log's size.
//
// A preallocator creates the next segment in the background (in
// commitlog.alloc) and, with Prefault, populates it (MADV_POPULATE_WRITE):
// a roll is a rename into commitlog/, and
// Append takes no page faults. Populating works in 2 MiB chunks on a
// per-segment cursor, at most 64 MiB ahead of the writer (Append wakes it
// every 2 MiB): first the active segment, then the next one, which is
// published as soon as it exists (a roll never waits for it, and a
// populated segment is never thrown away). A master that only serves
// reads populates nothing more, and a replica populates nothing at all:
// replicated appends (AppendAt, AppendAtFrom) write with pwrite, which
// fills fresh page-cache pages without the write fault (or populate) per
// page that a copy through the mapping needs first, several times the
// cost of the copy on a VM (docs/benchmarks.md). The dispatcher maps the
// written pages with one MADV_POPULATE_READ per round before it reads
// their record headers. A replica that Appends (promoted) populates ahead
// again.
//
// AppendAtFrom (beyond store.Store; store.AppenderFrom) is AppendAt reading
// its bytes from an io.Reader: a slave hands it the socket, and it reads
// through a buffer it reuses (1 MiB at most) and pwrites each piece (a
// raw system call with GOMAXPROCS > 1: vfs.NoHandoffWriterAt). A reader
// that also has View(max int) ([]byte, error) (the slave's frame reader
// on its read-ahead ring) is not copied from: each view is pwritten as it
// is and its records are walked in place, only a record that continues
// past a view's end being copied into the buffer (to be walked once
// complete); the walk's queue updates are applied when the append is
// published. The
// put lock is not held while it reads; other writers (Append, AppendAt,
// Truncate) wait for it, readers do not, and a failed read or write zeroes
// what it wrote and leaves the log unchanged.
//
// # Recovery (Open)
//
//  1. Segment files: names must be 20 digits; a zero-length last file is
//     deleted (RocketMQ rule). Files that all have one other valid size and
//     form a log of it were written with another SegmentSize: Open refuses
//     with a *SegmentSizeError (ErrSegmentSizeMismatch, not corruption)
//     naming that size. Any other size mismatch, an unaligned start or a
//     gap refuses to open with a CorruptError naming the file.
//  2. The scan verifies TOTALSIZE, MAGICCODE, every length, BODYCRC and
//     PHYSICALOFFSET from min(checkpoint scan offset, start of the 3rd-last
//     segment). Without a usable checkpoint the queue table is first rebuilt
//     from record headers over the older segments.
//  3. Where the scan stops is the end of the log, unless that is below the
//     checkpoint's flushed offset (data known durable is bad): then Open
//     refuses with a CorruptError naming file and offset (IsCorrupt). A
//     record straddling the flushed offset (a replica's partial record) is
//     torn, not corrupt. Without a checkpoint, bad bytes followed by a later
//     segment holding data are corruption.
//  4. Past the flushed offset BODYCRC is not enough (it covers only the
//     body): after a clean Close no record may end past the flushed offset,
//     and otherwise a record ending in a zero byte where RocketMQ never
//     writes one (a property list ends in \u0002, a topic in a topic
//     character) is a torn write.
//  5. The verified records are msynced (a checkpoint's scan offset never
//     passes its flushed offset), then the torn tail is cut as Truncate
//     does, below.
//
// # Truncate, crash-safe
//
// (1) Rewrite the checkpoint with a scan offset <= the cut and a flushed
// offset <= the cut (msyncing the records below the scan offset first);
// (2) zero the bytes from the cut to the old end of its segment and msync
// them; (3) remove later segments, last first, fsyncing the directory
// after each. A crash after (1) recovers the old log or the
// cut one; after (2) recovery stops at the cut (zeros) and removes what (3)
// left. Zeroing is what RocketMQ #10666 lacks: there the stale records stay
// valid on disk and come back after a crash.
//
// # Retention
//
// Every RetentionInterval, whole segments are deleted from the front while
// they were last written more than RetentionAge ago or the files total more
// than RetentionBytes; never the active segment, never a segment with a
// live View (retention stops there and retries later).
//
// # Concurrency and lock order
//
// All methods are safe for concurrent use. Locks, always taken in this
// order: ckptMu (checkpoint writes, Truncate, restarting an empty log) →
// mu (the put lock: Append, AppendAt, Truncate, segment list changes) →
// gcMu / the Watch notifier's lock (leaves). Read, Bounds and the flush itself take no lock:
// the segment list is an atomically replaced slice and segments are pinned
// by reference count. Goroutines: flusher, housekeeper (retention) and
// preallocator, all stopped and awaited by Close.
//
// # File system and fault injection
//
// Every file operation of the log goes through Options.FS, a vfs.FS (nil:
// vfs.Default, the operating system's): open and create, fallocate, mmap
// and msync of segments, pwrite of replicated bytes, the checkpoint's
// write and fsync, renames, removals and directory fsyncs. Stores into the
// mapping (Append) and madvise hints are memory operations and do not.
// Tests and the fault suite wrap the FS in vfs/errorfs to fail chosen
// operations: an msync with EIO (a sync-flush Append fails, and the first
// flush error sticks until a restart), a segment's creation with ENOSPC
// (the roll and the Append needing it fail, nothing is stored), a
// replicated pwrite whole or torn (the append fails, the bytes it wrote
// are zeroed again, the log is unchanged), or a kill at an exact step of
// a segment's creation or of Truncate (crash tests). The Log itself has
// no test hooks.
//
// # Observability
//
// Logs (hclog, Options.Logger): recovery, torn-tail cuts, truncations,
// retention. Metrics (Options.Registerer): replicator_commitlog_
// appended_bytes_total, appended_records_total, flushes_total,
// flush_duration_seconds, flush_timeouts_total, segments,
// max_offset_bytes, flushed_offset_bytes, truncations_total,
// retention_deleted_segments_total.
package commitlog
