// Package memstore is an in-memory store.Store: the twin of the commitlog
// plugin for tests and examples that want the real contract without
// files. It holds real RocketMQ records (sdk/record), in segments of a
// fixed size, under the commitlog store's rules, and passes the
// sdk/storetest conformance suite:
//
//   - Append encodes a record at the max offset, assigning its queue
//     offset; a record that does not fit the rest of its segment with
//     room for an end-of-file filler ([int32 remaining][int32 BlankMagic])
//     moves to the next segment after the filler.
//   - AppendAt takes raw bytes at exactly the max offset, never across a
//     segment end; on an empty log it may instead start the log at any
//     segment boundary (a new slave at its master's last segment).
//     Whole records among those bytes keep the queue offsets current, so
//     Append continues each queue on a promoted replica; bytes that are
//     not records stop that (Append is then refused), as in commitlog.
//   - Truncate cuts at record boundaries only and rewinds queue offsets.
//   - Watch is a store.Notifier: a non-blocking send on every change of
//     the max offset.
//
// One log, segments of S bytes (here a record r3 did not fit segment 0):
//
//	0            S                      2S
//	| r1 | r2 |F.|  r3  |  r4  | ...     |
//	           ^ filler: remaining = S - offset, then zeros
//
// Every byte stored counts as flushed. Close keeps the records: Reopen
// returns a new Store over them, as a restart finds a commit log's files
// (the conformance suite's restart cases). The store starts no
// goroutines.
package memstore
