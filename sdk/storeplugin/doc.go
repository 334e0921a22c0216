// Package storeplugin carries sdk/store.Store across a process boundary with
// hashicorp/go-plugin over gRPC. A store author writes an ordinary
// store.Store and a one-line main:
//
//	func main() { storeplugin.Serve("mystore", "1.0.0", open) }
//
// where open is an Opener (it gets the daemon's store settings in an
// OpenRequest). The host (internal/pluginhost) starts the binary, dispenses
// a *Conn and opens it into a *Client, which is a store.Store: the core
// cannot tell it from a builtin store. The proto (sdk/proto/storev1) and the
// gRPC shims (server.go, client.go) are private to this package; errors
// cross the boundary through one table (errors.go): store sentinels keep
// their identity for errors.Is, and a plugin process that is gone turns
// every call into ErrPluginShutdown.
//
// # The contract is the interface
//
// The host never opens, maps or writes a plugin's files: everything it
// knows of the store comes through Store's methods, called in the plugin
// by the server. A plugin is correct when its Store passes sdk/storetest
// (storetest.ProcessFactory runs the suite against the plugin process
// through this client), whatever its file layout.
//
// # Data path
//
// One unary gRPC call to a plugin costs about 300 µs on a 2-vCPU VM
// (../../../shared/docs/plugin-boundary.md), so nothing on the data path is
// one call per message:
//
//	host (Client)                                          plugin (server)
//	-------------                                          ---------------
//	Append / AppendAt ─┐ queue ─ batch ≤ BatchBytes ──────▶ append stream: Append,
//	(any goroutines)   └────── one ack per batch ◀──────── AppendAt in order; the
//	                   (results, bounds, and the stored     ack carries each Append's
//	                    bytes of each Append)               record (Store.Read)
//
//	Read at the tail:  the newest TailBytes the host appended (AppendAt's
//	                   data, the records the acks brought back): no call
//	Read elsewhere:    one chunk stream held open at the next offset ──▶ chunks
//	                   of ChunkBytes (a ReadChannel side channel read ahead by a
//	                   goroutine into pooled buffers, reused once the cache
//	                   dropped a chunk and its views are released, else a
//	                   gRPC ReadStream); a seek reopens it
//	Bounds / Watch:    cached; updated from acks, Truncate answers and the
//	                   Watch stream (at most one push per 10 ms) ◀── Watch
//	ReadMessages, Truncate, Flush, Close: unary, after the queue is acked
//
// Batches: the sender takes everything queued (up to BatchBytes, 256 KiB by
// default) whenever fewer than MaxInFlight (4) batches await their ack, so
// the batching window is the round trip of the batches in flight and a
// lone caller is never delayed (it sends its batch itself, from its own
// goroutine). Bounds snapshots carry a sequence number from the plugin, so
// an older snapshot never overwrites a newer one.
//
// Append waits for its batch's ack: the store assigns the record's offset,
// queue offset and timestamp. With ClientConfig.FrameAppends (the daemon's
// default unless it flushes synchronously) the host frames the record
// itself once it knows all three (the queue's next offset is learnt from
// the store's answer to an earlier Append; see Client.Append) and queues it
// as an AppendAt: the put is answered, and replicated, without waiting for
// the plugin process. AppendAt (a slave's frames) returns
// once queued when the host can check the call itself: offset is the max
// offset it knows (every append goes through it), the bytes stay inside
// one segment, the log is not empty and no Append awaits its answer. The
// bytes then count in Bounds().Max and Read serves them from the tail at
// once; like any store's unflushed bytes they are durable only when the
// flushed offset passes them. A queued AppendAt that the plugin refuses
// fails every later call (the store broke the contract the host checked).
// At most four batches of them wait unsent: beyond that AppendAt waits,
// so a slave slows to its plugin's pace. ClientConfig.SyncAppendAt makes
// every AppendAt wait for its ack. The Client is a store.AppenderFrom: a
// slave's receive loop hands it each frame body as a reader over the
// socket, and a queued AppendAtFrom reads it into the append ring on Linux
// (below), elsewhere into the tail block the batch is sent from (one copy
// less than AppendAt from the loop's buffer).
//
// # Append side channel
//
// A gRPC round trip between two processes costs about 115 µs on a 2-vCPU
// VM (HTTP/2 framing and four goroutine hand-offs per message on each
// side), which a producer that waits for each append pays. So the append
// stream runs on a side channel (sdk/internal/side): a plain unix socket
// the host creates in a private directory (mode 0700) and names, with a
// 32-byte token, in the AppendChannel call; the plugin dials it, writes the
// token and serves the stream there with the same messages (AppendBatch
// host -> plugin, AppendAck plugin -> host). Reads other than the tail's
// use a second kind of side channel the same way (ReadChannel: the plugin
// sends Chunk messages from an offset until the max offset, then
// half-closes).
//
// On a side channel the payloads travel beside the messages, as the
// frame's raw parts (layout in sdk/internal/side), never through the
// protobuf encoder:
//
//	frame            message (protobuf)                parts
//	AppendBatch      seq, ops without their payload    part i: op i's body
//	                 (Message.body, RawAppend.data     (Append) or bytes
//	                 empty), want_records              (AppendAt)
//	AppendAck        seq, results without record,      part i: the record op i
//	                 bounds                            stored (empty: none)
//	Chunk            offset                            one part: the bytes
//
// so the host writes a batch with one writev from its own buffers (the
// tail's copy of a slave's frames, the message's body), the plugin reads
// the payload once into a buffer it reuses and hands slices of it to
// Append and AppendAt, acks carry the stored records straight from the
// store's views, and a chunk goes from the plugin's mapping to the socket
// and into the host's chunk buffer with no copy in between. Every length
// is bounded (64 MiB a frame, 65 536 parts) before anything is allocated.
// A queued AppendAt goes to the socket from the sender goroutine, never
// from the slave's receive loop (a write that wakes the plugin can cost
// the loop its core before it reports the frame); frames that queue up
// meanwhile are merged into one op where the tail holds them contiguously.
// The plugin answers every batch with its own ack, written only after each
// op of the batch returned; while the next batch has already begun to
// arrive it holds the ack (up to 16) and writes the held acks together
// once it has applied the batches that were waiting, so a host that sends
// faster than one batch per round trip is woken once per group of acks
// (a catching-up slave, many producers), and a lone batch is answered at
// once. On Linux both ends read and write the socket with raw system
// calls on the runtime poller's descriptor (sdk/internal/side).
// The host half-closes the socket to end the stream; the plugin closes its
// side channels when the store closes. A plugin built with an older SDK
// answers Unimplemented and the host uses the gRPC Append stream
// (ClientConfig.DisableSideChannel forces that). Plugin authors do nothing:
// Serve provides it.
//
// # Append ring (Linux)
//
// A queued AppendAt (a slave's frames; see above) does not travel through
// the append side channel's socket on Linux: the host creates a ring in
// shared memory for each append side channel (sdk/internal/shmring, a
// sealed memfd passed to the plugin over the channel's socket with
// SCM_RIGHTS), reads each frame body from its TCP socket straight into the
// ring (AppendAtFrom; AppendAt copies its bytes in), and the plugin's SDK
// applies each entry from there: with the store's AppendAtFrom when it is
// a store.AppenderFrom, its reader a store.Viewer whose one view is the
// entry's bytes where they lie in the ring (the commitlog store writes
// them from there and walks their records while they are in the CPU's
// cache, as for a builtin slave's frames, instead of reading them back
// through its mapping in its dispatcher), else with AppendAt. A memfd rather
// than a file in the plugin's directory: nothing to clean up after a crash,
// no write-back of the ring's pages, the host never touches the plugin's
// files, and the seals (no shrink, no grow) keep the plugin's mapping
// whole whatever the host does to the file. One mapping, a 4096-byte
// header and the data area (the machine's byte order; each counter on its
// own cache line):
//
//	 0         8         12        16         24        64        72
//	+---------+---------+---------+----------+---------+---------+-- ...
//	| magic   | version | hdrSize | dataSize |         | head    |
//	| RPLRING1| u32 = 1 | u32 4096| u64      |         | u64     |
//	+---------+---------+---------+----------+---------+---------+-- ...
//	 128       136       192       196        256       264
//	+---------+-- ... --+---------+-- ... ----+---------+-- ...
//	| tail    |         | sleeping|           | waiting |
//	| u64     |         | u32     |           | u64     |
//	+---------+-- ... --+---------+-- ... ----+---------+-- ...
//	 320       324       328                  840              4096
//	+---------+---------+--------------------+-- ... --------+------------
//	| failed  | errLen  | err (512 bytes: a  |               | data area:
//	| u32     | u32     | storev1.Error)     |               | entries
//	+---------+---------+--------------------+-- ... --------+------------
//
//	head      host: bytes published (entries and wrap gaps) since the start
//	tail      plugin: bytes applied since the start
//	sleeping  1: the plugin is about to wait on the socket for a doorbell
//	waiting   0: no; w > 0: the host waits until at most w-1 bytes are unapplied
//	failed    1: the store refused an entry; err says why (the ring stops)
//
// Each entry, at an 8-byte aligned position (head and tail modulo the data
// size), is a 16-byte header (log offset i64, length u32, kind u32: 1 =
// AppendAt, 2 = a wrap gap to the area's end) and its bytes, padded to 8;
// an entry never wraps. The plugin reads every value of the host's before
// use (head within one data size ahead of its tail, an entry inside the
// area and inside what head published, a known kind, a non-negative
// offset): anything else is shmring.ErrCorrupt, and the channel closes.
//
// The socket carries the wake-ups only: the host rings (an AppendBatch
// with seq 0 and no ops, written by the sender goroutine, never by the
// slave's receive loop) when the plugin said it sleeps; the plugin
// notifies (an AppendAck with seq 0 and no results) when the host waits
// for room (until half the ring is free) or for the ring to empty, and
// when it stops at a refused entry. A catch-up rings the plugin about
// once per MiB instead of once per batch, and no batch is acked. Batches
// and the ring never interleave: the host puts nothing in the ring while
// batches are queued or unacked, and queues nothing while the ring holds
// entries, so the store sees every append in the host's order. Read of
// bytes that may still be in the ring applies the ring first; Flush,
// ReadMessages, Truncate and Close drain it as they drain the queue.
// AppendAtFrom's bytes are not kept in the host's tail (fresh tail blocks
// cost a page fault per 4 KiB): reading them back reads the plugin's.
// A ring entry the plugin refuses fails every later call, as a refused
// queued AppendAt does. The ring is asked for with ringVersionBit in the
// append channel's frame_version; a plugin that refuses it (an older
// SDK, another platform) gets a channel without, and
// ClientConfig.RingBytes < 0 turns it off. Plugin authors do nothing: the
// store sees AppendAt, or AppendAtFrom if it has that capability (the same
// append by the store contract).
//
// # Crashes
//
// A store plugin process that dies is not restarted: appends acknowledged
// by the plugin may not be durable, queued AppendAt and framed Appends may
// not be applied (the store opened again recovers to a valid prefix of
// what the host answered; a sync put's record is on the slave that acked
// it, as after a machine crash that loses a builtin store's unflushed tail),
// nor may the append ring's entries (what the store's AppendAt had written
// of them is its recovery's to keep or cut, as for a batch in flight:
// TestPluginCommitLogRingCrash), and the host's cached bounds and tail
// describe a process that is gone, so only a fresh open (its recovery) can
// say what the log holds. Every
// call fails with ErrPluginShutdown and the daemon stops cleanly (exit 1);
// its supervisor restarts the node, whose store recovers on open.
//
// Metrics: Client.Stats counts batches, appends, reads served from the
// tail or a ReadStream, and the append ring's entries, doorbells,
// notifications and waits. Tests: sdk/storetest runs the conformance suite
// through this shim, in process (storetest.PluginFactory, go-plugin's
// TestPluginGRPCConn) or against a plugin process (storetest.ProcessFactory).
package storeplugin
