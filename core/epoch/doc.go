// Package epoch is replicator's epoch file: RocketMQ 5's
// DATA/epochFileCheckpoint (and its backup epochFileCheckpoint.bak), the
// history of master epochs of one data directory, in RocketMQ's exact text
// format (CheckpointFile + EpochFileCache), with its operations.
//
// An entry says that the master of epoch E wrote the commit-log bytes from
// its start offset up to the next entry's start offset; the last entry is
// open-ended (Unbounded). The HA handshake exchanges these lists and
// ConsistentPoint tells a slave where its log stops agreeing with the
// master's.
//
// # File format
//
// Text, every line ending with "\n" (System.lineSeparator() on Linux),
// numbers in canonical decimal:
//
//	+-----------------------------+
//	| N                        \n | line 1: number of entries
//	| CRC                      \n | line 2: CRC-32 (IEEE) & 0x7FFFFFFF of the bytes below; 0 = not checked
//	| epoch_1-startOffset_1    \n | line 3: one line per entry, ascending epoch
//	| ...                         |
//	| epoch_N-startOffset_N    \n |
//	+-----------------------------+
//
// For example the list {epoch 1 from offset 0, epoch 2 from 4096} is the
// 24 bytes
//
//	"2\n" "1694929738\n" "1-0\n" "2-4096\n"
//
// where 1694929738 = crc32.ChecksumIEEE([]byte("1-0\n2-4096\n")) & 0x7FFFFFFF
// (RocketMQ's own example, {7 at 7000, 8 at 8000}, has CRC 773307083).
//
// The CRC covers the entry lines exactly as stored, separators included.
// Epochs are int32 >= 0, start offsets int64 >= 0; end offsets are not
// stored (each is the next entry's start).
//
// Decode is stricter than RocketMQ's reader, which skips lines it cannot
// split and accepts "\r\n", signs and leading zeros: anything but what
// Encode writes (and a CRC of 0) is ErrCorrupt, as are a count above
// MaxEntries (refused before allocating), a count that does not match the
// lines, epochs that do not ascend strictly and start offsets that
// decrease (equal start offsets, an epoch that wrote nothing, are read).
//
// # Writing
//
// Every change is written before the method returns, so that a crash
// (kill -9, power loss) at any point leaves files that read back as either
// the old or the new list:
//
//  1. epochFileCheckpoint.tmp gets the new text, fsync;
//  2. epochFileCheckpoint is renamed to epochFileCheckpoint.bak;
//  3. epochFileCheckpoint.tmp is renamed to epochFileCheckpoint, fsync of
//     the directory.
//
// When Open had to read the backup because the main file was corrupt, the
// next write replaces the corrupt main file without making it the backup:
// the backup keeps the (valid) previous list.
//
// RocketMQ copies the main file to .bak and overwrites the main file in
// place, without fsync: a crash can leave a torn main file, which its
// reader survives only through the .bak fallback. Here the main file is
// always complete; the .bak is still kept (the previous list), so that
// RocketMQ's reader and replicator's read the same directory alike.
//
// # Reading
//
// Open reads the main file; when it is missing (a crash between steps 2
// and 3) or corrupt, it reads the backup, as RocketMQ does. It logs
// nothing itself: File.Recovery says which file was used and why
// (OpenWithOptions takes a logger for one WARN line instead). Neither file
// valid: an error wrapping ErrCorrupt. Neither file present: an empty
// list.
//
// # Empty lists (differs from RocketMQ)
//
// RocketMQ never writes an empty list (CheckpointFile.write returns at
// once) and its reader treats an empty main file as missing and reads the
// .bak. Truncating every entry (a slave whose whole log is cut, retention
// of everything) therefore leaves the old list on disk, and a restart
// resurrects epochs whose bytes are gone. Replicator writes the empty list
// as "0\n0\n" (count 0, the CRC of no bytes is 0) and reads a valid empty
// main file as empty, without falling back; it then writes the same text
// over the .bak too, so that even RocketMQ's reader, falling back, reads
// an empty list.
//
// # Append rule (differs from RocketMQ in one case)
//
// RocketMQ's appendEntry refuses an entry unless both its epoch and its
// start offset exceed the last entry's. Append refuses (ErrNotNewer) an
// epoch not greater or a start offset smaller, but when the start offset
// equals the last entry's — the last epoch's master wrote nothing — the
// new entry replaces the last one. RocketMQ refuses it and leaves a broker
// promoted twice without writing on the older epoch in its file while it
// is master of the newer one; the replaced entry covers no byte, so no
// lookup, truncation or consistent point depends on it, and start offsets
// stay strictly ascending as RocketMQ's peers expect.
//
// # Operations
//
// FindByOffset (start <= off < end), Get, Next (smallest greater epoch),
// TruncateSuffixByEpoch (drop epoch >= E), TruncateSuffixByOffset (drop
// start >= O), TruncatePrefixByOffset (drop end <= O; the last entry is
// never dropped), ConsistentPoint (RocketMQ's findConsistentPoint over two
// lists given WithEnd's concrete last end offsets) follow
// store/…/ha/autoswitch/EpochFileCache.java. Truncations write only when
// they change the list.
package epoch
