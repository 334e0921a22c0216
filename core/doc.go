// Package core is replicator's replication pipeline: the master (accept loop,
// per-slave reader and writer, ack tracking, group transfer for sync
// replication) and the slave HA client (connect, report, receive, verify,
// append, re-report). It knows the store and the transport only through the
// sdk/store and transport interfaces — the master a store.Store (its puts
// append messages), the slave a store.Log (raw bytes at its max offset:
// record boundaries come from store.ScanRecords over Read views, never
// from the message view) — and speaks RocketMQ 4.x's classic HA
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
//     them in one vectored write (transport.FrameBatch, which owns the
//     frame headers) — the same bytes, fewer system calls. It
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
// Master.PutBatch (the producer stream's put, through Replica.PutBatch and
// controller/member's Member.PutBatch in the other modes) appends a batch
// in one run and waits as one waiter for all its records: keyed by its
// lowest uncovered next offset, it moves on as quorums cover its records
// (each covered record is PUT_OK from then on, even if a later one times
// out) and leaves the heap once the last is covered, after SlaveTimeout
// (FLUSH_SLAVE_TIMEOUT for the rest), or when ctx ends or the master is
// fenced or closed. One timer and one wake-up serve the whole batch.
//
// MaxLag (off by default: RocketMQ has no flow control) is back-pressure for
// an ASYNC_MASTER: a put waits in the same heap, for the offset MaxLag below
// its next offset, so it returns once the slaves are within MaxLag of it (or
// after SlaveTimeout, or at once when no slave is available), always PUT_OK.
//
// # Slave
//
// NewSlave (over a store.Log) + Start run the HA client: dial the master (ConnectTimeout),
// report the local max offset at once (RocketMQ 4.x waits 5 s), read frames
// split anywhere in the stream, drop the connection when a frame's offset
// differs from the local max offset (unless the log is empty; heartbeats
// included), append bodies with Store.AppendAt, report after each applied
// batch that grew the offset and at least every ReportInterval (5 s), close
// after HousekeepingInterval (20 s) without reading, and reconnect after
// ReconnectDelay (5 s) once a connection of the client was up (RocketMQ's
// steady state). Until then — after Start, so after every role change, as
// Replica.BecomeSlave starts a new client — it retries after 50 ms,
// doubling up to ReconnectDelay: a master named by an election opens its
// HA listener a moment after the group names it, and its slaves' first
// dial is often refused. A frame that crosses the slave's own segment end
// (master and slave segment sizes differ) is logged once and shown in
// SlaveStatus.SegmentError. Any store error other than the store's sentinels
// stops replication (the store is unusable). SlaveNode.Put always fails with
// ErrSlaveWriteProtected.
//
// The receive loop (receive.go) is one loop for both protocols and both
// body paths, three steps a frame: receive (a frame source from package
// transport parses the header), append (the body reaches the store through
// the source's body callback: Store.AppendAt from the reader's buffer, or
// store.AppenderFrom's AppendAtFrom straight from the socket), report (the
// loop decides: before it waits, when the reader says nothing is buffered
// (transport.ErrWouldBlock from an armed transport.ConnReader); after every
// autoswitch heartbeat; at least every 4 MiB applied). A store never
// reports, so a change of reader or store cannot change when acks go out.
//
// When the store implements store.AppenderFrom (the commitlog store does) and the
// connection has a file descriptor (plain TCP on Linux), the slave hands
// each frame body to the store as a reader over the socket
// (transport.DirectReader or AutoSwitchDirectReader over a
// transport.ConnReader; the commitlog store writes each body with pwrite
// straight from the read-ahead ring: transport.DirectReader.View), and reports when the socket runs dry —
// everything received is applied — and at least every 4 MiB. On such a
// connection the ConnReader reads the socket ahead of the loop, on a
// goroutine of its own, into a ring of four 1 MiB buffers
// (ConnReader.StartReadAhead), so that the next frames arrive while the
// loop writes this one to the store: the socket copy and the store's
// write run on both cores (docs/benchmarks.md, catch-up). The bytes on the wire
// are the same; other stores and connections (TLS, in-memory) go through a
// FrameReader and Store.AppendAt.
//
// # Autoswitch protocol
//
// With Protocol ProtocolAutoSwitch (MasterConfig and SlaveConfig) core
// speaks RocketMQ 5's controller-mode protocol instead (frame layouts and
// their byte diagrams in package transport and docs/protocol.md):
//
//	slave -> master   HANDSHAKE [1][syncFromLastFile i16][asyncLearner i16][brokerId i64]   16 bytes, once
//	                  ack       [2][max offset i64]                                           12 bytes, repeated
//	master -> slave   HANDSHAKE [1][12N][max offset][last epoch] N x [epoch i32][start i64]  N <= 1000
//	                  TRANSFER  [2][size][offset][epoch][epoch start][confirm offset] body   36-byte header
//
// The master answers each slave's handshake with its epoch file
// (core/epoch), chooses the start at the first ack (0: the first segment,
// or the last with isSyncFromLastFile), cuts every batch of frames at the
// current epoch's end as well as at segment ends (same gathered vectored
// writes as classic, with 36-byte headers), drops a connection when data is
// pending where no epoch covers it (RocketMQ #9689), replaces an older
// connection of the same broker id, and keeps the SyncStateSet (expand on
// catching up, shrink after MaxTimeSlaveNotCatchup or on disconnect,
// changes through a SyncStateSetConfirmer, the union of current and
// proposed sets while one is in flight) and the confirm offset
// (computeConfirmOffset, #6662, #6728, #7656), sent in every header. A
// SyncMaster put waits for every in-sync member but the master (SyncAcks
// 0) or SyncAcks handshaken non-learner slaves; a set of one answers
// PUT_OK at once. Master.Fence refuses puts and fails waiting sync puts
// with ErrFenced.
//
// The slave sends its handshake, computes the consistent point of both
// epoch lists (epoch.ConsistentPoint), truncates its epoch file and log to
// it (a record boundary, logged at WARN with what was cut, counted in
// replicator_ha_truncated_bytes_total) or refuses (no consistent point, or
// a log with data and no epoch history: one ERROR line,
// SlaveStatus.Unhealthy, replicator_ha_no_consistent_point_total, retry
// after ReconnectDelay, nothing appended), acks at once and receives:
// offsets checked as in classic, a frame of an older epoch than its last
// refused, a newer epoch appended to the epoch file before the body, the
// confirm offset kept as min(frame's, local max).
//
// Replica switches one store and epoch file between the two roles at run
// time (BecomeMaster appends {epoch, max offset}; BecomeSlave fences the
// master first), with OnConnect hooks pushed when the slave reaches
// TRANSFER. BecomeMaster on a replica that is not master first cuts a
// partial record at the log's end (its master died, or the link went,
// while sending it: frames split records, and a master appends only at a
// record boundary), logged at WARN with from, to and bytes and counted in
// replicator_ha_truncated_bytes_total; controller mode (controller/member)
// and a manual promote take the same path.
//
// # In-sync set membership
//
// A member's caught-up time moves only on its acks, as in RocketMQ 5's
// AutoSwitchHAConnection: an ack of the master's max offset catches it up
// now, an ack that reaches the max offset the writer saw at a recent
// transfer catches it up at that transfer's time (the writer remembers
// its transfers, one record per 50 ms over at least 6.4 s; RocketMQ keeps
// only the last, so that a slave one frame behind a master that never
// stops writing would never catch up). Bytes leaving the master's socket
// prove nothing: a silently partitioned slave (acks lost, connection up)
// leaves the set once MaxTimeSlaveNotCatchup passed since its last such
// ack, at the next check (CheckSyncStateSetPeriod), not when its idle
// connection finally closes. An idle member keeps acking: the autoswitch
// slave acks every heartbeat, and the master heartbeats an idle connection
// at min(HeartbeatInterval, MaxTimeSlaveNotCatchup/3), so that a healthy
// member stays even when MaxTimeSlaveNotCatchup is below the slave's
// ReportInterval. A slave joins the set only from an ack that reaches the
// confirm offset (and the current epoch's start); a new connection of a
// member's broker id keeps the member's caught-up time.
//
// # The slave's receive loop
//
// One loop (receive.go) serves both protocols and both body paths, three
// steps a frame, in this order: receive a frame, append its body, report.
// The frame source parses headers; the body goes to the log through a
// body callback (AppendAt from the reader's buffer, or AppenderFrom
// straight from the socket). The loop decides when to
// report: before each frame it arms the connection reader
// (transport.ConnReader); when the reader would have to wait for the
// master it answers transport.ErrWouldBlock instead — everything received
// is applied — and the loop reports, then reads again, waiting. It also
// reports every 4 MiB applied during a catch-up that never runs dry.
//
// # Classic hardening
//
// A classic slave whose log ends at a record boundary (a log handed to
// NewSlave: recovered or written as a master) checks the first body of each
// connection: the bytes at its max offset must start a record (size field,
// magic code, fits in the segment, PHYSICALOFFSET when whole); whether the
// log ends at a boundary is found with store.ScanRecords. If they do
// not, the master's log is not its continuation: it drops the connection,
// logs ERROR once, sets SlaveStatus.Unhealthy, counts
// replicator_ha_diverged_log_total and appends nothing (so it never acks
// beyond what it held). An empty slave's first frame must be at a multiple
// of its segment size (else SegmentError). A master logs an out-of-range
// request offset at ERROR once per source host every 10 minutes.
//
// # Time, logs and metrics
//
// core uses the standard clock and timers, so tests drive it with
// testing/synctest over transport/memtransport connections (faults
// injected on its links) and the SDK's in-memory store,
// sdk/store/memstore. Logs go to the hclog.Logger
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
// replicator_ha_sync_wait_duration_seconds and replicator_ha_puts_total{status},
// replicator_ha_sync_state_set_members, replicator_ha_truncated_bytes_total,
// replicator_ha_no_consistent_point_total and replicator_ha_diverged_log_total.
// A master and a slave may share one registry, and a Master or SlaveNode
// created again on the same registry (a role change) reuses the registered
// collectors, so counts carry on.
//
// # Concurrency and lock order
//
// Master and SlaveNode are safe for concurrent use. Master.mu guards the
// connection set, the per-connection report state and the group-transfer
// heap; no other lock is taken while holding it but a connection's
// transfer-record lock, a leaf. On the slave a session's
// report lock is taken before SlaveNode.mu, never the other way round.
package core
