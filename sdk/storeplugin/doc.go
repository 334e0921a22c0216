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
//	Append / AppendAt ─┐ queue ── batch ≤ BatchBytes ──▶ Append stream: applies
//	(any goroutines)   └────── one ack per batch ◀──── each batch in order,
//	                      (results + bounds snapshot)   answers with one ack
//
//	AppendAt, files shared: pwrite into the segment ─▶ InPlace{off,len} op on
//	  file (page cache), return at once                the stream: the plugin
//	                                                   reads the bytes back and
//	                                                   calls its AppendAt
//
//	Read, files shared:  mmap(PROT_READ, MAP_SHARED) of the plugin's segment
//	  files, views into the mapping, no round trip (SegmentFile once a segment)
//	Read, not shared:    ReadStream(from, 1 MiB) ──▶ 256 KiB chunks ─▶ cache
//
//	Bounds / Watch:      cached; updated from acks, Truncate answers and the
//	                     Watch stream (plugin pushes on change) ◀── Watch
//
// Batches: the sender takes everything queued (up to BatchBytes, 256 KiB by
// default) whenever fewer than MaxInFlight (4) batches await their ack, so
// the batching window is the round trip of the batches in flight and a
// lone caller is never delayed. Bounds snapshots carry a sequence number
// from the plugin, so an older snapshot never overwrites a newer one.
//
// In-place appends: a plugin whose store implements SegmentFiles promises
// RocketMQ's MappedFile model (fixed segment files at multiples of the
// segment size, bytes below the max offset stable until a Truncate, files
// removed whole, never shrunk in place). Then the host writes AppendAt's
// bytes into an existing segment file itself and returns once they are in
// the page cache, as an in-process mmap store does; the plugin adopts them in
// order on the append stream. A later refusal by the plugin fails every
// following call. Truncate, Flush, ReadMessages and Close first wait until
// every queued append has been acked.
//
// Metrics: Client.Stats counts batches and appends. Tests: sdk/storetest
// runs the conformance suite through this shim in process
// (storetest.PluginFactory, go-plugin's TestPluginGRPCConn).
package storeplugin
