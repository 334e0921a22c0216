// Package store defines the commit-log interfaces that replicator
// replicates and serves, their result types and their sentinel errors.
// The builtin implementation is plugins/commitlog (RocketMQ's on-disk
// layout on mmap'd segments); third-party stores implement the same
// interfaces (sdk/storeplugin carries them across a process boundary), and
// sdk/store/memstore is their in-memory twin for tests. sdk/storetest is
// the conformance suite.
//
// Two views of one log:
//
//   - Log, the byte log: AppendAt, Read, Bounds, Truncate, Watch, Close.
//     It is all that core's slave side asks for (a slave appends the
//     master's bytes at its max offset), and what a master's connections
//     read to ship.
//   - Messages, the message view: Append (a master's put) and
//     ReadMessages (the API's reads).
//
// Store is both, and is what an implementation provides; a Store is a Log
// wherever a Log is asked for.
//
// Next to the interfaces:
//
//   - AppenderFrom, an optional capability of a Log, found with a type
//     assertion: AppendAt reading the bytes from a reader (the slave's
//     socket).
//   - ScanRecords, record boundaries over a Log's Read views: it walks
//     and verifies record headers (fillers move it to the next segment)
//     and stops at a bound, at the max offset or at a partial record,
//     with ErrNotBoundary or ErrCorrupt for bytes that are not records.
//     Core finds its consistent point, the partial record to cut before
//     becoming master and whether its log ends at a record boundary with
//     it, so it never needs the message view on the slave side.
//   - Notifier, the Watch half of the contract, ready to embed: Watch
//     registers a channel, Notify wakes every one without blocking.
//   - SegmentName and ParseSegmentName, RocketMQ's segment file names
//     (UtilAll.offset2FileName): the start offset in 20 zero-padded
//     digits, and Bounds.SegmentStart, the segment that holds an offset.
//     A segment is the store's unit (Bounds.SegmentSize; no read or append
//     crosses a segment end), so its name belongs here rather than with
//     the record format in sdk/record.
//
// Segment files of a log with S = 1 GiB:
//
//	commitlog/
//	  00000000000000000000   segment [0, S)
//	  00000000001073741824   segment [S, 2S)
package store
