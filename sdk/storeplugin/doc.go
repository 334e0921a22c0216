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
// # Data path
//
// One unary gRPC call to a plugin costs about 300 µs on a 2-vCPU VM
// (../../../shared/docs/plugin-boundary.md), so nothing on the data path is
// one call per message:
//
//	host (Client)                                        plugin (server)
//	-------------                                        ---------------
//	Append / AppendAt ─┐ queue ── batch ≤ BatchBytes ──▶ append stream: applies
//	(any goroutines)   └────── one ack per batch ◀──── each batch in order,
//	                      (results + bounds snapshot)   answers with one ack
//
//	append stream: a unix-socket side channel (below), else the gRPC
//	  Append stream (plugins built with an SDK without AppendChannel)
//
//	AppendAt, files shared: pwrite into the segment ─▶ InPlace{off,len} op on
//	  file (page cache), return at once                the stream: the plugin
//	                                                   reads the bytes back and
//	                                                   calls its AppendAt
//	Append, files shared: encode the record (v1) at ─▶ InPlace op, the same
//	  the max offset, pwrite, return at once           way (hostappend.go)
//
//	Read, files shared:  mmap(PROT_READ, MAP_SHARED) of the plugin's segment
//	  files, views into the mapping, no round trip (SegmentFile once a segment)
//	Read, not shared:    ReadStream(from, 1 MiB) ──▶ 256 KiB chunks ─▶ cache
//
//	Bounds / Watch:      cached; updated from acks, Truncate answers and the
//	                     Watch stream (plugin pushes changes, at most one
//	                     push per 10 ms) ◀── Watch
//
// Batches: the sender takes everything queued (up to BatchBytes, 256 KiB by
// default) whenever fewer than MaxInFlight (4) batches await their ack, so
// the batching window is the round trip of the batches in flight and a
// lone caller is never delayed (it sends its batch itself, from its own
// goroutine). In-place appends (nobody waits for them) go out only when no
// batch is in flight, unless a waiting caller is queued too: meanwhile they
// accumulate, and contiguous ones inside one segment travel as one InPlace
// op that the plugin reads back and adopts with one AppendAt, so a busy
// node wakes its plugin once per round trip rather than once per record. Bounds snapshots carry a sequence number from the plugin, so
// an older snapshot never overwrites a newer one.
//
// # Host-encoded appends
//
// Even on the side channel, a producer that waits for its Append waits for
// a round trip between two processes (about 40-80 µs here), several times
// what an in-process commit log takes. When the plugin shares its files and
// takes host writes, the host encodes a master's record itself (RocketMQ's
// v1 format, which the shared files hold by contract), at the max offset,
// with the next queue offset of its (topic, queue) learned from the store's
// answer to the first Append of that queue; writes it into the segment file;
// returns the result at once; and the plugin adopts the bytes in order with
// its AppendAt, as for a slave. Appends the host cannot decide (the first of
// a queue after an open, a Truncate or a raw AppendAt; one that would need a
// new segment; one above max_message_size or invalid; any while an Append
// sent to the plugin awaits its answer; all of them with sync_flush=true)
// go to the plugin. ClientConfig.DisableHostAppends turns it off;
// Client.Stats counts HostEncoded appends.
//
// # Append side channel
//
// A gRPC round trip between two processes costs about 115 µs on a 2-vCPU VM
// (HTTP/2 framing and four goroutine hand-offs per message on each side),
// which caps a producer that waits for each append. So the append stream
// runs on a plain unix socket instead: the host creates it in a private
// directory (mode 0700) and sends its path and a 32-byte token in the
// AppendChannel call; the plugin dials it, writes the token, and serves the
// stream there with the same messages (storev1.AppendBatch host -> plugin,
// storev1.AppendAck plugin -> host), each framed by its length:
//
//	 0                4                       4+len
//	+----------------+-----------------------+
//	| len  u32 (BE)  | protobuf message      |
//	+----------------+-----------------------+
//
// len is bounded by plugin.MaxMessageBytes (64 MiB) before anything is
// allocated. The host half-closes the socket to end the stream; the plugin
// closes its side channels when the store closes. A plugin built with an
// older SDK answers Unimplemented and the host uses the gRPC stream
// (ClientConfig.DisableSideChannel forces that). Plugin authors do nothing:
// Serve provides it.
//
// # In-place appends: the contract
//
// A plugin whose store implements SegmentFiles promises RocketMQ's
// MappedFile model (see SegmentFiles for the full list): each segment file
// holds the log's raw bytes at their offset from the segment base, bytes
// below the max offset stable until a Truncate, files removed whole, never
// shrunk, replaced or renamed, and an AppendAt that keeps the queue offsets
// of the records it adopts. Then the host writes a slave's AppendAt bytes
// (and a master's encoded records) into an existing segment file itself and returns once they are in the page
// cache, as an in-process mmap store does; the plugin adopts them in order
// on the append stream (its AppendAt gets the same bytes, which it must
// write at their position, not at the file's end, and which it must not
// count as part of the log before that). A store that shares its files for
// reading but writes them its own way (O_APPEND, a file header, blocks with
// checksums, compression) implements NoHostWrites as well, or does not
// implement SegmentFiles at all. A later refusal by the plugin fails every
// following call. Truncate, Flush, ReadMessages and Close first wait until
// every queued append has been acked.
//
// # Crashes
//
// A store plugin process that dies is not restarted: appends acknowledged
// by the plugin may not be durable, in-place appends may not be adopted,
// and the host's mappings and cached bounds describe a process that is
// gone, so only a fresh open (its recovery) can say what the log holds.
// Every call fails with ErrPluginShutdown and the daemon stops cleanly
// (exit 1); its supervisor restarts the node, whose store recovers on open.
//
// Metrics: Client.Stats counts batches and appends. Tests: sdk/storetest
// runs the conformance suite through this shim in process
// (storetest.PluginFactory, go-plugin's TestPluginGRPCConn).
package storeplugin
