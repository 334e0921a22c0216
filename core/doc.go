// Package core is replicator's replication pipeline: the master (accept loop,
// per-slave reader and writer, ack tracking, group transfer for sync
// replication) and the slave HA client (connect, report, receive, verify,
// append, re-report). It knows the store and the transport only through the
// sdk/store and transport interfaces, and speaks RocketMQ 4.x's classic HA
// protocol byte for byte through package transport's framing (the wire
// format and its byte diagrams live there):
//
//	slave -> master   [max offset int64]                     8 bytes, repeated
//	master -> slave   [offset int64][size int32][size bytes]  size <= 32 KiB; 0 = heartbeat
//
// # Master
//
// NewMaster + Start open the HA listener. Each accepted connection is one
// slave (the protocol has no handshake) and gets two goroutines:
//
//  1. The reader parses 8-byte reports; per socket read the last complete
//     value counts (RocketMQ's rule). The first value is the request
//     offset, every value is the slave's ack. A negative value, an ack
//     beyond the master's max offset (RocketMQ 4.9.3+, fix for #3015),
//     malformed input or HousekeepingInterval (20 s) without reading
//     anything closes the connection, with one log line.
//  2. The writer sends nothing until the first report. It then starts at
//     the request offset, or, for a report of 0, at the start of the
//     master's last segment (4.x) or its first (StartFromFirstSegment, as
//     5.x). It ships Store.Read views of at most TransferBatchSize bytes,
//     one frame each, never across a segment end, and sends a heartbeat
//     [next][0] after HeartbeatInterval (5 s) without sending. When several
//     frames are available (catch-up, many producers) it sends up to 16 of
//     them in one vectored write — the same bytes, fewer system calls. It
//     sleeps on Store.Watch, so an append wakes it at once: no polling
//     delay. A
//     request offset outside the master's log gets heartbeats only, as in
//     RocketMQ (#3388), but is logged once, shown in Status
//     (SlaveInfo.OutOfRange) and counted in metrics; an out-of-range
//     slave's reports never release sync puts.
//
// Whichever goroutine fails first closes the socket, the other one exits,
// and the connection is forgotten (its metric series are deleted).
//
// # Group transfer
//
// An ASYNC_MASTER put returns after the local append. A SYNC_MASTER put
// (RocketMQ 4.x semantics) returns SLAVE_NOT_AVAILABLE at once when fewer
// than SyncAcks slaves are connected less than SlaveFallBehindMax (256 MiB)
// behind, else waits until SyncAcks distinct connections have each
// acknowledged the record's next offset (PUT_OK) or SlaveTimeout passes
// (FLUSH_SLAVE_TIMEOUT). The store's sync-flush timeout combines as in
// RocketMQ's handleDiskFlushAndHA: a replica status other than PUT_OK wins,
// else FLUSH_DISK_TIMEOUT. Waiters sit in a min-heap by next offset; each ack
// recomputes the SyncAcks-th highest ack of the connected slaves and pops
// exactly the waiters it covers — no 10 ms or 1 s polling.
//
// MaxLag (off by default: RocketMQ has no flow control) is back-pressure for
// an ASYNC_MASTER: a put waits in the same heap, for the offset MaxLag below
// its next offset, so it returns once the slaves are within MaxLag of it (or
// after SlaveTimeout, or at once when no slave is available), always PUT_OK.
//
// # Slave
//
// NewSlave + Start run the HA client: dial the master (ConnectTimeout),
// report the local max offset at once (RocketMQ 4.x waits 5 s), read frames
// split anywhere in the stream, drop the connection when a frame's offset
// differs from the local max offset (unless the log is empty; heartbeats
// included), append bodies with Store.AppendAt, report after each applied
// batch that grew the offset and at least every ReportInterval (5 s), close
// after HousekeepingInterval (20 s) without reading, and reconnect after
// ReconnectDelay (5 s). A frame that crosses the slave's own segment end
// (master and slave segment sizes differ) is logged once and shown in
// SlaveStatus.SegmentError. Any store error other than the store's sentinels
// stops replication (the store is unusable). SlaveNode.Put always fails with
// ErrSlaveWriteProtected.
//
// When the store implements AppenderFrom (the commitlog store does) and the
// connection has a file descriptor (plain TCP on Linux), the slave hands
// each frame body to the store as a reader over the socket
// (transport.DirectReader, readv(2): the body and the next header in one
// system call, no staging copy in the core; the commitlog store reads it
// into its own buffer and writes it with pwrite), and reports when the
// socket runs dry — everything
// received is applied — and at least every 1 MiB. The bytes on the wire
// are the same; other stores and connections (TLS, in-memory) go through a
// FrameReader and Store.AppendAt.
//
// # Time, logs and metrics
//
// core uses the standard clock and timers, so tests drive it with
// testing/synctest over in-memory connections. Logs go to the hclog.Logger
// in the config (sub-loggers "master" and "slave"): connect, disconnect,
// start offset, offset mismatch, timeouts, out-of-range requests. Metrics go
// to the prometheus.Registerer in the config (nil: none): per-slave
// replicator_ha_slave_ack_offset_bytes{slave} and
// replicator_ha_slave_lag_bytes{slave}, replicator_ha_sent_bytes_total,
// replicator_ha_sent_frames_total, replicator_ha_received_bytes_total,
// replicator_ha_received_frames_total, replicator_ha_heartbeats_total{direction},
// replicator_ha_connections, replicator_ha_connections_total,
// replicator_ha_connection_closes_total{reason},
// replicator_ha_out_of_range_requests_total, replicator_ha_reports_total,
// replicator_ha_client_connected, replicator_ha_client_reconnects_total,
// replicator_ha_offset_mismatches_total,
// replicator_ha_sync_wait_duration_seconds and replicator_ha_puts_total{status}.
// A master and a slave may share one registry.
//
// # Concurrency and lock order
//
// Master and SlaveNode are safe for concurrent use. Master.mu guards the
// connection set, the per-connection report state and the group-transfer
// heap; no other lock is taken while holding it. On the slave a session's
// report lock is taken before SlaveNode.mu, never the other way round.
package core
