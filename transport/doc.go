// Package transport defines how a master and its slaves are connected
// (the Transport interface: Listen and Dial of plain byte streams) and owns
// the wire formats spoken on every transport: RocketMQ 4.x classic HA and
// RocketMQ 5's controller-mode ("AutoSwitch") HA, byte for byte (see the
// AutoSwitch section below; the two are not compatible in either direction
// and a connection speaks one of them, chosen by configuration). The classic
// protocol has no handshake, magic number, version or checksum;
// compatibility with real RocketMQ peers is a product feature, so nothing is
// added to these bytes. TLS, when configured, wraps the same bytes
// (plugins/transport-tcp).
//
// Implementations of Transport: plugins/transport-tcp (package tcptransport,
// real TCP, the default) and transport/memtransport (in memory, seeded fault
// injection, for deterministic tests with fake time). transport/transporttest
// is the conformance suite every implementation passes.
//
// # Slave -> master: reports
//
// A stream of bare 8-byte big-endian values, nothing else:
//
//	 0                   8                  16
//	+-------------------+-------------------+----
//	| maxOffset  int64  | maxOffset  int64  | ...
//	+-------------------+-------------------+----
//
// Each value is the slave's commit-log max offset (the first byte it does
// not have). The first value on a connection is the request offset: where
// the master starts sending. Later values are acks, sent after each applied
// frame that grew the slave's log, and at least every 5 s
// (haSendHeartbeatInterval) as a keepalive.
//
// The master reads with RocketMQ's rule (ReportReader): after each read that
// completes at least one value, only the LAST complete value of that read
// counts; values are aligned to multiples of 8 bytes from the start of the
// stream, across reads. A negative value is a protocol violation
// (ErrNegativeOffset).
//
// # Master -> slave: frames
//
//	 0                   8          12                    12+size
//	+-------------------+----------+---------------------+
//	| offset     int64  | size i32 | body (size bytes)   |
//	+-------------------+----------+---------------------+
//
// offset is the commit-log offset of the first body byte; body is size raw
// commit-log bytes copied from there. Frames follow each other back to back
// with no terminator. The master keeps a body within haTransferBatchSize
// (DefaultBatchSize, 32 KiB; configurable) and never lets it cross a
// commit-log segment end. No frame may exceed MaxBodyLimit (4 MiB - 12): a
// Java slave reads into a 4 MiB buffer and could never parse it.
//
// A heartbeat is a frame with size 0, sent after 5 s without sending; its
// offset is the master's next transfer offset for this slave:
//
//	 0                   8          12
//	+-------------------+----------+
//	| next offset int64 | 0    i32 |
//	+-------------------+----------+
//
// FrameReader (slave side) parses frames split at any byte; it validates each
// header as soon as its 12 bytes arrive, before waiting for the body:
// a negative size (ErrNegativeSize), a size above the reader's limit
// (ErrFrameTooLarge) and a negative offset (ErrNegativeOffset) are rejected
// without allocating. The slave compares each frame's offset (heartbeats
// included) with its own max offset and drops the connection on a mismatch
// when its log is not empty; that check is core's, not this package's.
//
// DirectReader parses the same frames with the same rules and errors, but
// hands each body to the caller's memory (a slave's mapped commit-log
// segment) instead of returning a view of its own buffer: the body of a
// frame of 4 KiB or more is read from the stream straight into the
// destination, together with the next frame's 12-byte header in the same
// vectored read (readv(2) through a VectorReader), so a slave that keeps up
// with a catch-up stream makes one system call and no user-space copy per
// frame. Small frames are read many at a time into a 64 KiB staging buffer
// and copied out, as FrameReader does.
//
// ConnReader is the slave's socket: deadlines, Arm/ErrWouldBlock (report
// when the socket runs dry) and, with StartReadAhead, a ring of four
// 1 MiB buffers that a goroutine fills while the caller works on the
// previous frames. That goroutine runs only while the socket holds a
// backlog: a caller's read of 256 KiB or more starts it, and it
// ends as soon as it finds the socket empty, handing the reads back to the
// caller; so a catch-up overlaps the socket copy with the store's write,
// and sync replication's small frames cost no goroutine hand-off. View
// hands out the ring's bytes without a copy (valid until the next read);
// DirectReader.View and AutoSwitchDirectReader.View do the same for a
// frame's body, so that a store writes it from the ring.
//
// # Start offset
//
// Nothing flows master->slave before the slave's first report. A first
// report of 0 (an empty slave) makes a RocketMQ 4.x master start at the
// beginning of its LAST commit-log segment, so older history is not copied;
// a larger value starts exactly there. A request outside the master's range
// gets heartbeats only. These choices belong to core; the bytes are the same.
//
// # AutoSwitch (controller-mode) protocol
//
// RocketMQ 5's AutoSwitchHAService protocol. Every frame, both ways, starts
// with the sender's HAConnectionState ordinal (HAState: READY 0, HANDSHAKE
// 1, TRANSFER 2, SUSPEND 3, SHUTDOWN 4); only HANDSHAKE and TRANSFER frames
// exist on the wire. All fields are big-endian.
//
// Slave -> master handshake, 16 bytes (AppendSlaveHandshake), sent first on
// every connection; a flag is true when its i16 is 1:
//
//	 0         4                 6               8                        16
//	+---------+-----------------+---------------+------------------------+
//	| state 1 | syncFromLastFile| asyncLearner  | slave broker id  int64 |
//	|   i32   |  i16 (0 or 1)   | i16 (0 or 1)  |                        |
//	+---------+-----------------+---------------+------------------------+
//
// Slave -> master ack, 12 bytes (AppendAck): the slave's max offset, sent
// after each frame that grew its log and every 5 s:
//
//	 0         4                      12
//	+---------+----------------------+
//	| state 2 | slave max offset i64 |
//	+---------+----------------------+
//
// Master -> slave handshake, a 20-byte header and N 12-byte epoch entries
// (AppendMasterHandshake), the reply to each slave handshake; bodySize is
// 12N and N is at most MaxHandshakeEpochs (1000: RocketMQ's master encodes
// the list into a 12 000-byte buffer and would fail beyond it):
//
//	 0         4            8                     16          20
//	+---------+------------+---------------------+-----------+----------------
//	| state 1 | bodySize   | master max offset   | lastEpoch | N x entry
//	|   i32   | i32 = 12N  |        i64          |    i32    |
//	+---------+------------+---------------------+-----------+----------------
//
//	entry:  0           4                    12
//	       +-----------+--------------------+
//	       | epoch i32 | start offset i64   |   ascending epochs
//	       +-----------+--------------------+
//
// Master -> slave transfer frame, a 36-byte header and bodySize commit-log
// bytes starting at offset (PutTransferHeader). A body never crosses the end
// of its epoch or of a commit-log segment; bodySize 0 is a heartbeat (after
// 5 s without a frame) whose offset is the master's next transfer offset:
//
//	 0         4          8               16        20                  28               36
//	+---------+----------+---------------+---------+-------------------+----------------+------
//	| state 2 | bodySize | offset   i64  | epoch   | epochStartOffset  | confirmOffset  | body
//	|   i32   |   i32    |               |  i32    |       i64         |      i64       |
//	+---------+----------+---------------+---------+-------------------+----------------+------
//
// SlaveFrameReader (master side) reads the 4-byte state, then the rest of a
// 16-byte handshake or a 12-byte ack; any other state is ErrBadState as soon
// as its 4 bytes arrive (a classic slave's first 8-byte report reads as
// state 0 for any offset below 4 GiB, and is refused). Unlike the classic
// ReportReader, every ack is returned: RocketMQ's AutoSwitch master
// processes each one. (RocketMQ's master starts decoding a handshake once 12
// of its 16 bytes are buffered; this reader waits for all 16.) A negative
// ack is ErrNegativeOffset.
//
// MasterFrameReader and AutoSwitchDirectReader (slave side) validate each
// header as soon as it is buffered, before its body is awaited and before
// anything is allocated: a state other than HANDSHAKE or TRANSFER
// (ErrBadState); a handshake bodySize that is negative (ErrNegativeSize),
// not a multiple of 12 (ErrBadHandshake) or above 1000 entries
// (ErrTooManyEpochs); a transfer bodySize that is negative or above the
// reader's maxBody, at most MaxTransferBodyLimit = 4 MiB - 36 as the Java
// slave's 4 MiB buffer (ErrFrameTooLarge); any negative offset, max offset,
// epoch start offset or confirm offset (ErrNegativeOffset; a RocketMQ master
// whose confirm offset was never computed could send -1: the connection is
// then refused and retried). The epoch list of a handshake is decoded into
// a slice reused across handshakes. These protocol errors are sticky
// *FrameError values naming the field and the frame's stream position. The
// readers do not judge the protocol's semantics (a state that does not match
// the slave's own state, an offset that is not the slave's max offset,
// epochs out of order): that is core's.
//
// AutoSwitchDirectReader is DirectReader for this protocol: a transfer body
// of 4 KiB or more is read straight into the caller's memory together with
// up to 36 bytes of the next frame in one vectored read; handshakes are
// staged and returned whole. The two direct readers parse their own
// headers and share the staging and body streaming (directbody.go).
//
// # Errors
//
// Readers return io.EOF bare when the peer closed cleanly on a frame (or
// report) boundary, and an error matching both ErrTruncated and
// io.ErrUnexpectedEOF (never io.EOF) when it closed in the middle of one.
// Protocol violations are sticky sentinels wrapped in *HeaderError or
// *ReportError (allocation-free). Other read and write errors are wrapped
// with "transport:" context and keep their cause for errors.Is and
// errors.As (net.Error timeouts included).
//
// # Buffers and allocation
//
// A FrameReader allocates its buffer once (DefaultReadBufferSize, 4 MiB, as
// RocketMQ's slave; at least HeaderSize+maxBody) but, while frames are
// small, cycles through only its first 256 KiB, which stays cache-warm; the
// rest is touched only by frames above 128 KiB. A returned Frame.Body
// aliases the buffer until the next call. The writers: FrameWriter sends
// header and body with one vectored write (writev on TCP) and does not
// copy the body; FrameBatch, the master's, holds up to MaxBatchFrames
// frames of either protocol (classic or TRANSFER headers, built in the
// batch's own memory next to the callers' bodies) and sends all their
// headers and bodies in one vectored write; NewReportWriter's 8-byte
// reports and NewAckWriter's 12-byte autoswitch acks ([TRANSFER][offset])
// are one Write each. Readers and writers allocate nothing per frame or
// report. None of them is safe for
// concurrent use: one goroutine reads, one writes.
package transport
