// Package store defines the commit-log store interface that replicator's
// core replicates, its result types and its sentinel errors. The builtin
// implementation is plugins/commitlog (RocketMQ's on-disk layout on mmap'd
// segments); third-party stores implement the same interface, and
// sdk/store/memstore is its in-memory twin for tests.
//
// Next to the interface:
//
//   - AppenderFrom, an optional capability found with a type assertion:
//     AppendAt reading the bytes from a reader (the slave's socket).
//   - Notifier, the Watch half of the contract, ready to embed: Watch
//     registers a channel, Notify wakes every one without blocking.
//   - SegmentName and ParseSegmentName, RocketMQ's segment file names
//     (UtilAll.offset2FileName): the start offset in 20 zero-padded
//     digits. A segment is the store's unit (Bounds.SegmentSize; no read
//     or append crosses a segment end), so its name belongs here rather
//     than with the record format in sdk/record.
//
// Segment files of a log with S = 1 GiB:
//
//	commitlog/
//	  00000000000000000000   segment [0, S)
//	  00000000001073741824   segment [S, 2S)
package store
