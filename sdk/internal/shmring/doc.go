// Package shmring is a single-producer, single-consumer ring of entries in
// shared memory between two processes: a host that writes log bytes and a
// plugin that applies them to its store (sdk/storeplugin's append stream on
// Linux). The memory is a sealed memfd the producer creates (Create) and
// hands to the consumer over a unix socket with SCM_RIGHTS (Attach): no
// file in anyone's directory, nothing left behind by a crash, no
// write-back of the ring's pages, and the seals (no shrink, no grow) mean
// the consumer's mapping can never lose pages under it (a file could be
// truncated by its peer, and the consumer would die of SIGBUS).
//
// The ring moves no wake-ups by itself: the two sides keep a socket for
// those (doorbells), and the header's flags say when one is needed (the
// consumer is about to sleep; the producer waits for room or for the ring
// to empty).
//
// # Layout
//
// One mapping: a 4096-byte header, then the data area (dataSize bytes, a
// multiple of 8, between MinData and MaxData). All integers are in the
// machine's byte order (both processes run on one machine); the counters
// sit on cache lines of their own and are read and written with atomic
// operations:
//
//	offset  size  field      written by  meaning
//	0       8     magic      producer    "RPLRING1"
//	8       4     version    producer    1
//	12      4     hdrSize    producer    4096
//	16      8     dataSize   producer    bytes of the data area
//	64      8     head       producer    bytes published since the start (entries, wrap gaps)
//	128     8     tail       consumer    bytes consumed (applied) since the start
//	192     4     sleeping   both        1: the consumer is about to wait for a doorbell
//	256     8     waiting    both        0: no; w > 0: the producer waits until at most w-1 bytes are unconsumed
//	320     4     failed     consumer    1: the consumer stopped at an entry it could not apply
//	324     4     errLen     consumer    length of err (read as at most MaxErr)
//	328     512   err        consumer    its error, opaque to the ring (sdk/storeplugin: a storev1.Error)
//
// The data area holds entries at 8-byte aligned positions (head and tail
// modulo dataSize), never wrapping inside one:
//
//	 0          8          12         16                    16+len   pad to 8
//	+----------+----------+----------+---------------------+--------+
//	| offset   | len u32  | kind u32 | bytes (len)         | 0..7   |
//	| i64      |          |          |                     |        |
//	+----------+----------+----------+---------------------+--------+
//
//	kind 1  append len bytes at the log offset offset (Store.AppendAt)
//	kind 2  wrap: the rest of the data area is a gap; the next entry is at 0
//
// Fewer than 16 bytes before the data area's end are a gap as well (no
// marker fits there). The producer writes an entry's bytes and header
// first and then moves head past it; the consumer reads head, then the
// entry, applies it and moves tail. Every value one side reads of the
// other's is checked before use (head never behind tail nor more than
// dataSize ahead, an entry inside the area and inside what head
// published, a known kind, a non-negative offset, an error within
// its field): a violation is ErrCorrupt, never a panic or an access outside
// the mapping.
package shmring
