package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"

	"github.com/replicatorhq/replicator/internal/budget"
	"github.com/replicatorhq/replicator/internal/producerwire"
)

// StreamPath is the URL path prefix of the producer stream (gRPC service
// replicator.producer.v1.Producer) on the API port.
const StreamPath = "/" + "replicator.producer.v1.Producer" + "/"

// Defaults of StreamLimits.
const (
	// DefaultStreamBatchMessages bounds the messages of one PutRequest.
	DefaultStreamBatchMessages = 4096
	// DefaultStreamInflightBytes bounds the bytes of the messages a stream
	// has taken and not answered yet; past it the stream stops reading (HTTP/2
	// flow control then holds the client).
	DefaultStreamInflightBytes = 32 << 20
	// DefaultStreamNodeInflightBytes bounds the same over every stream of
	// the node.
	DefaultStreamNodeInflightBytes = 256 << 20
	// DefaultStreamIdleTimeout ends a stream that sent nothing and waits for
	// nothing this long.
	DefaultStreamIdleTimeout = 2 * time.Minute
	// DefaultStreamWriteTimeout bounds the sending of one PutResponse to a
	// client that does not read.
	DefaultStreamWriteTimeout = time.Minute
	// StreamBatchOverhead is what a batch may hold beyond one message body
	// of MaxBodyBytes (topic, properties, framing): the gRPC message limit is
	// MaxBodyBytes + StreamBatchOverhead.
	StreamBatchOverhead = 256 << 10
	// messageCost is the in-flight cost of a message beyond its body.
	messageCost = 128
	// maxResultsPerResponse bounds the results of one PutResponse.
	maxResultsPerResponse = 1024
)

// StreamLimits bound the producer stream; zero fields take the defaults.
type StreamLimits struct {
	BatchMessages     int
	InflightBytes     int64
	NodeInflightBytes int64
	IdleTimeout       time.Duration
	WriteTimeout      time.Duration
}

func (l *StreamLimits) defaults() {
	if l.BatchMessages <= 0 {
		l.BatchMessages = DefaultStreamBatchMessages
	}
	if l.InflightBytes <= 0 {
		l.InflightBytes = DefaultStreamInflightBytes
	}
	if l.NodeInflightBytes <= 0 {
		l.NodeInflightBytes = DefaultStreamNodeInflightBytes
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultStreamIdleTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultStreamWriteTimeout
	}
}

// streamService serves replicator.producer.v1.Producer on the API port:
// on gRPC's own transport for the connections a Port hands to it
// (listen.go), and through the API's http.Server (grpc.Server.ServeHTTP)
// for gRPC over plain ALPN h2: the same TLS, token, connection limit and
// request metrics as the JSON routes either way.
type streamService struct {
	producerv1.UnimplementedProducerServer
	s      *Server
	lim    StreamLimits
	grpc   *grpc.Server
	node   *budget.Budget
	met    streamMetrics
	maxMsg int
}

type streamMetrics struct {
	active   prometheus.Gauge
	messages *prometheus.CounterVec
	batches  prometheus.Counter
	batchLen prometheus.Histogram
	inflight prometheus.Gauge
	errors   *prometheus.CounterVec
}

func newStreamService(s *Server) *streamService {
	lim := s.cfg.Stream
	lim.defaults()
	maxMsg := int(s.cfg.MaxBodyBytes) + StreamBatchOverhead
	ss := &streamService{s: s, lim: lim, node: budget.New(lim.NodeInflightBytes), maxMsg: maxMsg}
	ss.met = streamMetrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replicator_stream_active_streams",
			Help: "Producer streams open now.",
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_stream_messages_total",
			Help: "Messages answered on producer streams, by result: a put status (PUT_OK, FLUSH_SLAVE_TIMEOUT, ...) or an error (invalid_message, too_large, slave, not_master, no_master, fenced, shutting_down, no_space, internal).",
		}, []string{"result"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_stream_batches_total",
			Help: "Batches (PutRequest) received on producer streams.",
		}),
		batchLen: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replicator_stream_batch_messages",
			Help:    "Messages per batch received on producer streams.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13),
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replicator_stream_inflight_bytes",
			Help: "Bytes of messages taken from producer streams and not answered yet.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_stream_errors_total",
			Help: "Producer streams ended by an error, by reason: malformed (a batch that does not decode), too_large (a batch over the limit), sequence (a sequence that does not grow), batch_size (too many messages), idle, client_gone, shutdown.",
		}, []string{"reason"}),
	}
	ss.grpc = grpc.NewServer(ss.serverOptions()...)
	producerv1.RegisterProducerServer(ss.grpc, ss)
	return ss
}

// serverOptions are the options of both gRPC servers of the stream: the
// one behind the http.Server (ServeHTTP) and the native one (Port).
func (ss *streamService) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(ss.maxMsg),
		grpc.MaxSendMsgSize(16 << 20),
		// The batches encode and decode themselves (producerwire: the
		// same protobuf bytes, no reflection, bodies not copied), on
		// buffers that are not zeroed when reused.
		grpc.ForceServerCodecV2(producerwire.Codec{}),
		experimental.BufferPool(producerwire.Pool),
	}
}

// httpKey carries the stream's HTTP side into the gRPC handler.
type httpKey struct{}

// streamHTTP is the HTTP side of one stream. gRPC's handler transport may
// return from ServeHTTP (a connection closed) while the stream's handler
// still runs: the response controller is used only while ServeHTTP runs.
type streamHTTP struct {
	gate *gatedBody
	mu   sync.Mutex
	rc   *http.ResponseController // nil once ServeHTTP returned
}

func (h *streamHTTP) setReadDeadline(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rc != nil {
		h.rc.SetReadDeadline(t)
	}
}

func (h *streamHTTP) setWriteDeadline(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rc != nil {
		h.rc.SetWriteDeadline(t)
	}
}

// ServeHTTP takes gRPC requests (HTTP/2, application/grpc) to the gRPC
// server and answers anything else with a JSON error.
func (ss *streamService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		WriteError(w, http.StatusMethodNotAllowed, "the producer stream is gRPC: POST over HTTP/2")
		return
	}
	if r.ProtoMajor != 2 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		WriteError(w, http.StatusUnsupportedMediaType, "the producer stream is gRPC over HTTP/2 (content type application/grpc); use the Go client package or a gRPC client of producer.proto")
		return
	}
	if enc := r.Header.Get("Grpc-Encoding"); enc != "" && enc != "identity" {
		WriteError(w, http.StatusUnsupportedMediaType, "the producer stream takes no compression (grpc-encoding "+enc+")")
		return
	}
	rc := http.NewResponseController(w)
	// The server's read and write timeouts are per request: a stream lives
	// longer. It gets an idle read deadline, moved on with every batch, and
	// a write deadline per answer instead.
	rc.SetReadDeadline(time.Now().Add(ss.lim.IdleTimeout))
	rc.SetWriteDeadline(time.Time{})
	h := &streamHTTP{rc: rc, gate: newGatedBody(r.Body, int64(ss.maxMsg)+64<<10)}
	r = r.WithContext(context.WithValue(r.Context(), httpKey{}, h))
	r.Body = h.gate
	ss.grpc.ServeHTTP(w, r)
	h.mu.Lock()
	h.rc = nil
	h.mu.Unlock()
}

// putResult is answered messages: a job's, or one refused message.
type putResult struct {
	enc  []byte // their PutResponse.results elements (producerwire.AppendResult)
	n    int    // how many (at most maxResultsPerResponse)
	cost int64  // their in-flight cost
}

// Put serves one producer stream.
func (ss *streamService) Put(stream producerv1.Producer_PutServer) error {
	ctx := stream.Context()
	h, _ := ctx.Value(httpKey{}).(*streamHTTP)
	native := h == nil
	if native {
		h = &streamHTTP{}
	}
	remote := ""
	var born netip.AddrPort
	var conn *grpcConn
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
		if ap, err := netip.ParseAddrPort(remote); err == nil && ap.Addr().Unmap().Is4() {
			born = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		if ca, ok := p.Addr.(*connAddr); ok {
			conn = ca.conn
		}
	}
	log := ss.s.log.With("remote", remote)
	if native && conn != nil {
		// gRPC's transport has no write deadline: a client that does not
		// read its results for WriteTimeout loses its connection.
		ds := &deadlineSender{Producer_PutServer: stream}
		ds.timer = time.AfterFunc(time.Hour, func() {
			log.Warn("producer stream: the client read no results for the write timeout; closing its connection", "write_timeout", ss.lim.WriteTimeout)
			conn.Close()
		})
		ds.timer.Stop()
		ds.timeout = ss.lim.WriteTimeout
		defer ds.timer.Stop()
		stream = ds
	}
	ss.met.active.Inc()
	defer ss.met.active.Dec()
	// Say when this stream ends idle, so that the client closes an idle
	// stream first rather than race the close with a batch.
	idle := metadata.Pairs(producerv1.IdleTimeoutMetadata, strconv.FormatInt(ss.lim.IdleTimeout.Milliseconds(), 10))
	if err := stream.SendHeader(idle); err != nil {
		log.Debug("producer stream: sending the headers failed", "error", err)
		return err
	}

	st := &putStream{
		ss: ss, stream: stream, http: h, gate: h.gate, born: born,
		own:     budget.New(ss.lim.InflightBytes),
		jobs:    make(chan putJob),
		putCtx:  context.WithoutCancel(ctx),
		recvCtx: ctx,
		native:  native,
	}
	st.lastBatch.Store(time.Now().UnixNano())
	err := st.recvLoop(ctx)
	// Every message taken is answered before the stream ends (the handler
	// must not return while puts could still send): a job sends its
	// results before it is done, and take sends its refusals itself.
	st.puts.Wait()
	st.takeMu.Lock() // a receive still in take has sent what it refused
	st.takeMu.Unlock()
	close(st.jobs) // no take runs any more: the idle workers end
	st.sendMu.Lock()
	sendErr := st.sendErr
	st.sendMu.Unlock()
	if err != nil {
		reason, code, msg := classifyRecvErr(err)
		ss.met.errors.WithLabelValues(reason).Inc()
		switch reason {
		case "client_gone":
			log.Debug("producer stream ended by the client", "error", err)
		case "shutdown":
			log.Debug("producer stream ended: the node is shutting down")
		case "idle":
			log.Debug("producer stream ended: idle", "idle_timeout", ss.lim.IdleTimeout)
		default:
			log.Warn("producer stream closed", "reason", reason, "error", msg)
		}
		return status.Error(code, msg)
	}
	if sendErr != nil {
		log.Debug("producer stream: sending results failed", "error", sendErr)
		return sendErr
	}
	return nil
}

// Stream errors of recvLoop.
var (
	errSequence  = errors.New("sequence does not grow")
	errBatchSize = errors.New("too many messages in a batch")
	errShutdown  = errors.New("the node is shutting down")
	errMalformed = errors.New("malformed batch")
	errIdle      = errors.New("stream idle for too long")
)

// deadlineSender bounds each Send of a native stream: the timer (its
// expiry closes the connection) runs while a Send does.
type deadlineSender struct {
	producerv1.Producer_PutServer
	timer   *time.Timer
	timeout time.Duration
}

func (d *deadlineSender) Send(r *producerv1.PutResponse) error { return d.SendMsg(r) }

func (d *deadlineSender) SendMsg(m any) error {
	d.timer.Reset(d.timeout)
	err := d.Producer_PutServer.SendMsg(m)
	d.timer.Stop()
	return err
}

// recvBatch is what the stream receives (a PutRequest): it decodes itself
// (producerwire.Codec) and keeps a decoding error here rather than
// failing the receive, which would end the stream before the results of
// the messages already taken are sent.
type recvBatch struct {
	dec  producerwire.Decoder
	max  int // messages per batch
	msgs []producerwire.Message
	// buf holds the batch's bytes, which the bodies of msgs alias; the
	// batch's jobs take references until their puts are done.
	buf  mem.Buffer
	size int
	err  error
}

// UnmarshalBuffers decodes a PutRequest (producerwire.Unmarshaler).
func (b *recvBatch) UnmarshalBuffers(data mem.BufferSlice) error {
	b.size = data.Len()
	b.buf = producerwire.Hold(data)
	b.msgs, b.err = b.dec.DecodeRequest(b.buf.ReadOnlyData(), b.msgs[:0], b.max)
	return nil
}

// release drops the batch's bytes (its jobs hold their own references).
func (b *recvBatch) release() {
	clear(b.msgs)
	if b.buf != nil {
		b.buf.Free()
		b.buf = nil
	}
}

// classifyRecvErr names a stream error for the metrics and the status.
func classifyRecvErr(err error) (reason string, code codes.Code, msg string) {
	switch {
	case errors.Is(err, errShutdown):
		return "shutdown", codes.Unavailable, "the node is shutting down; send the messages without a result again (to its new master, or once it is back)"
	case errors.Is(err, errSequence):
		return "sequence", codes.InvalidArgument, err.Error()
	case errors.Is(err, errBatchSize):
		return "batch_size", codes.InvalidArgument, err.Error()
	case errors.Is(err, errMalformed):
		return "malformed", codes.InvalidArgument, err.Error()
	case errors.Is(err, errIdle):
		return "idle", codes.DeadlineExceeded, err.Error()
	}
	if s, ok := status.FromError(err); ok {
		switch {
		case s.Code() == codes.ResourceExhausted:
			return "too_large", codes.ResourceExhausted, "batch over the limit: " + s.Message()
		case strings.Contains(s.Message(), "i/o timeout"), strings.Contains(s.Message(), "deadline"), errors.Is(err, os.ErrDeadlineExceeded):
			return "idle", codes.DeadlineExceeded, "stream idle for too long"
		}
	}
	return "client_gone", codes.Canceled, "stream ended by the client: " + err.Error()
}

// putStream is one Put call.
type putStream struct {
	ss      *streamService
	stream  producerv1.Producer_PutServer
	http    *streamHTTP
	gate    *gatedBody
	born    netip.AddrPort
	own     *budget.Budget
	puts    sync.WaitGroup
	putCtx  context.Context
	lastSeq uint64
	// recvCtx is the stream's context; errc takes the error that ends
	// the receiving.
	recvCtx context.Context
	errc    chan error
	// The results: whoever queues results while nobody sends becomes the
	// sender and sends until nothing is queued (no goroutine of its own,
	// no hand-off per response).
	sendMu  sync.Mutex
	sending bool
	queued  []putResult
	spare   []putResult
	resp    responseParts
	sendErr error
	// jobs hands puts to idle workers; idleWorkers counts them.
	jobs        chan putJob
	idleWorkers atomic.Int32
	// takeMu orders take against the end of the stream: once stopped,
	// no more puts start.
	takeMu  sync.Mutex
	stopped bool
	// native: served by a Port's gRPC server, which has no read deadline:
	// recvLoop ends the stream IdleTimeout after lastBatch (UnixNano)
	// while nothing is in flight.
	native    bool
	lastBatch atomic.Int64
}

// recvLoop takes batches until the client half-closes (nil), the stream
// fails, or the node drains. The receiving runs on a worker (receiving,
// passed from worker to worker with each batch) so that a drain does not
// wait for the client's next batch; once recvLoop returns, no more
// messages are taken (the receiving may still sit in a receive until the
// stream ends).
func (st *putStream) recvLoop(ctx context.Context) error {
	st.errc = make(chan error, 1)
	errc := st.errc
	go st.worker(putJob{recv: &recvBatch{max: st.ss.lim.BatchMessages}})
	var idle <-chan time.Time
	if st.native {
		t := time.NewTimer(st.ss.lim.IdleTimeout)
		defer t.Stop()
		idle = t.C
		for {
			select {
			case err := <-errc:
				return err
			case <-st.ss.s.drain:
				return st.stop(errShutdown)
			case now := <-idle:
				left := st.ss.lim.IdleTimeout
				if st.own.Used() == 0 {
					left = time.Duration(st.lastBatch.Load() + int64(st.ss.lim.IdleTimeout) - now.UnixNano())
				}
				if left <= 0 {
					return st.stop(errIdle)
				}
				t.Reset(left)
			}
		}
	}
	select {
	case err := <-errc:
		return err
	case <-st.ss.s.drain:
		return st.stop(errShutdown)
	}
}

// stop ends the taking of messages with err.
func (st *putStream) stop(err error) error {
	st.takeMu.Lock()
	st.stopped = true
	st.takeMu.Unlock()
	return err
}

// errHandedOff: receive handed the receiving to another goroutine.
var errHandedOff = errors.New("receiving handed off")

// receiving is the receive side of the stream on a worker: it ends the
// stream with receive's error, unless it handed the receiving on.
func (st *putStream) receiving(b *recvBatch) {
	if err := st.receive(st.recvCtx, b); !errors.Is(err, errHandedOff) {
		b.release()
		st.errc <- err
	}
}

// receive takes batches into b. One goroutine receives at a time: after a
// batch it hands the receiving to an idle worker (with b) and puts the
// batch's last job itself, so that the put starts without a goroutine
// hand-off (errHandedOff).
func (st *putStream) receive(ctx context.Context, b *recvBatch) error {
	for {
		b.release()
		if err := st.stream.RecvMsg(b); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if st.gate != nil {
			// gRPC frames: 5 bytes of header, then the message.
			st.gate.consume(5 + int64(b.size))
		}
		if errors.Is(b.err, producerwire.ErrTooManyMessages) {
			st.ss.met.batches.Inc()
			return fmt.Errorf("%w: more than %d messages", errBatchSize, st.ss.lim.BatchMessages)
		}
		if b.err != nil {
			return fmt.Errorf("%w: %w", errMalformed, b.err)
		}
		if st.native {
			st.lastBatch.Store(time.Now().UnixNano())
		} else {
			st.http.setReadDeadline(time.Now().Add(st.ss.lim.IdleTimeout))
		}
		st.takeMu.Lock()
		if st.stopped {
			st.takeMu.Unlock()
			return errShutdown
		}
		j, err := st.take(ctx, b)
		st.takeMu.Unlock()
		if err != nil {
			b.release()
			return err
		}
		if j.msgs != nil {
			b.release()
			st.start(putJob{recv: b})
			st.run(j)
			return errHandedOff
		}
	}
}

// take starts the puts of one batch, waiting for in-flight budget first.
// The messages it accepts are put as one job (Backend.PutBatch: one
// replica wait for the batch). When the budget makes take wait, the
// messages accepted so far start first as a job of their own: they hold
// budget that only their results give back.
func (st *putStream) take(ctx context.Context, b *recvBatch) (last putJob, err error) {
	msgs := b.msgs
	st.ss.met.batches.Inc()
	st.ss.met.batchLen.Observe(float64(len(msgs)))
	for i := range msgs {
		if seq := msgs[i].Sequence; seq <= st.lastSeq {
			return putJob{}, fmt.Errorf("%w: message sequence %d after %d (sequences start at 1 and grow along a stream)", errSequence, seq, st.lastSeq)
		} else {
			st.lastSeq = seq
		}
	}
	drain := st.ss.s.drain
	// One allocation each for the batch's record messages, their
	// pointers and their sequences and costs; a job is a run of them.
	recs := make([]record.Message, len(msgs))
	ptrs := make([]*record.Message, 0, len(msgs))
	meta := make([]jobMeta, 0, len(msgs))
	first := 0 // the current job's first message in ptrs and meta
	flush := func() {
		if len(ptrs) > first {
			b.buf.Ref()
			st.puts.Add(1)
			st.start(putJob{msgs: ptrs[first:len(ptrs):len(ptrs)], meta: meta[first:len(meta):len(meta)], buf: b.buf})
			first = len(ptrs)
		}
	}
	// noWait makes Acquire fail (budget.ErrStopped) rather than wait.
	var noWait chan struct{}
	acquire := func(bud *budget.Budget, cost int64) error {
		if len(ptrs) > first {
			if noWait == nil {
				noWait = make(chan struct{})
				close(noWait)
			}
			if bud.Acquire(ctx, noWait, cost) == nil {
				return nil
			}
			flush()
		}
		return bud.Acquire(ctx, drain, cost)
	}
	defer func() {
		if err != nil {
			flush() // what was accepted before the error
		}
	}()
	for i := range msgs {
		m := &msgs[i]
		cost := int64(len(m.Body)+len(m.Topic)) + messageCost
		for k, v := range m.Properties {
			cost += int64(len(k) + len(v))
		}
		if err := acquire(st.own, cost); err != nil {
			return putJob{}, st.acquireErr(err)
		}
		if err := acquire(st.ss.node, cost); err != nil {
			st.own.Release(cost)
			return putJob{}, st.acquireErr(err)
		}
		st.ss.met.inflight.Add(float64(cost))
		if res, ok := st.ss.message(m, st.born, &recs[i]); !ok {
			st.ss.met.messages.WithLabelValues(resultLabel(&res)).Inc()
			st.queue(putResult{enc: producerwire.AppendResult(nil, &res), n: 1, cost: cost})
			continue
		}
		ptrs = append(ptrs, &recs[i])
		meta = append(meta, jobMeta{seq: m.Sequence, cost: cost})
	}
	if len(ptrs) > first {
		// The batch's last job: the caller puts it.
		b.buf.Ref()
		st.puts.Add(1)
		last = putJob{msgs: ptrs[first:], meta: meta[first:], buf: b.buf}
	}
	return last, nil
}

// maxIdleWorkers bounds the put workers a stream keeps waiting for work.
const maxIdleWorkers = 1024

// putJob is the messages of a batch to put together, in order, with
// their sequences and in-flight costs, and a reference to the batch's
// bytes that their bodies alias.
type putJob struct {
	msgs []*record.Message
	meta []jobMeta
	buf  mem.Buffer
	// recv, when set, makes the job the stream's receiving, with this
	// batch to receive into (receiving).
	recv *recvBatch
}

type jobMeta struct {
	seq  uint64
	cost int64
}

// start runs j on an idle worker, or on a new one. A put waits for its
// slaves, so each job runs on a goroutine of its own; the goroutines are
// kept for the stream's next jobs because a fresh goroutine grows its
// stack during every put (7 % of the master's CPU at 64 producers).
func (st *putStream) start(j putJob) {
	select {
	case st.jobs <- j:
	default:
		go st.worker(j)
	}
}

// worker runs j, then the jobs handed to it while it waits, until the
// stream ends or enough other workers wait.
func (st *putStream) worker(j putJob) {
	for {
		if j.recv != nil {
			st.receiving(j.recv)
		} else {
			st.run(j)
		}
		if st.idleWorkers.Add(1) > maxIdleWorkers {
			st.idleWorkers.Add(-1)
			return
		}
		var ok bool
		j, ok = <-st.jobs
		st.idleWorkers.Add(-1)
		if !ok {
			return
		}
	}
}

// run stores j's messages and sends their results, in order, encoded as
// they are made (no Result message per put), as many per PutResponse as
// maxResultsPerResponse allows.
func (st *putStream) run(j putJob) {
	defer st.puts.Done()
	out := st.ss.s.cfg.Backend.PutBatch(st.putCtx, j.msgs)
	j.buf.Free() // the store has the bodies now
	var (
		pr        putResult
		label     string
		labelRun  int
		parts     []putResult
		resultLen = 48
	)
	for i := range out {
		if pr.n == maxResultsPerResponse {
			parts = append(parts, pr)
			pr = putResult{}
		}
		if pr.enc == nil {
			pr.enc = make([]byte, 0, min(len(out)-i, maxResultsPerResponse)*resultLen)
		}
		res := st.ss.result(j.meta[i].seq, j.msgs[i].Topic, out[i].PutResult, out[i].Err)
		pr.enc = producerwire.AppendResult(pr.enc, &res)
		pr.n++
		pr.cost += j.meta[i].cost
		// One counter update per run of equal results.
		if l := resultLabel(&res); l != label {
			if labelRun > 0 {
				st.ss.met.messages.WithLabelValues(label).Add(float64(labelRun))
			}
			label, labelRun = l, 0
		}
		labelRun++
	}
	if labelRun > 0 {
		st.ss.met.messages.WithLabelValues(label).Add(float64(labelRun))
	}
	if len(parts) == 0 {
		st.queue(pr)
		return
	}
	st.queue(append(parts, pr)...)
}

func (st *putStream) acquireErr(err error) error {
	if errors.Is(err, budget.ErrStopped) {
		return errShutdown
	}
	return err
}

// queue sends rs, or leaves them to the goroutine sending now, which
// sends them before it stops. Results leave in the order they are queued.
func (st *putStream) queue(rs ...putResult) {
	st.sendMu.Lock()
	st.queued = append(st.queued, rs...)
	if st.sending {
		st.sendMu.Unlock()
		return
	}
	st.sending = true
	for len(st.queued) > 0 {
		batch := st.queued
		st.queued = st.spare[:0]
		st.sendMu.Unlock()
		err := st.send(batch)
		clear(batch)
		st.sendMu.Lock()
		st.spare = batch[:0]
		if err != nil && st.sendErr == nil {
			st.sendErr = err
		}
	}
	st.sending = false
	st.sendMu.Unlock()
}

// send sends rs, as few PutResponses as maxResultsPerResponse allows,
// and releases their budget; after a failed send it only releases.
func (st *putStream) send(rs []putResult) error {
	st.sendMu.Lock()
	err := st.sendErr
	st.sendMu.Unlock()
	for i := 0; i < len(rs); {
		n, j := rs[i].n, i+1
		for j < len(rs) && n+rs[j].n <= maxResultsPerResponse {
			n += rs[j].n
			j++
		}
		if err == nil {
			st.http.setWriteDeadline(time.Now().Add(st.ss.lim.WriteTimeout))
			st.resp.parts = rs[i:j]
			err = st.stream.SendMsg(&st.resp)
			st.resp.parts = nil
		}
		var cost int64
		for _, r := range rs[i:j] {
			cost += r.cost
		}
		st.own.Release(cost)
		st.ss.met.inflight.Sub(float64(cost))
		st.ss.node.Release(cost)
		i = j
	}
	return err
}

// responseParts is a PutResponse made of encoded results
// (producerwire.Marshaler).
type responseParts struct{ parts []putResult }

func (r *responseParts) Size() int {
	n := 0
	for _, p := range r.parts {
		n += len(p.enc)
	}
	return n
}

func (r *responseParts) AppendTo(b []byte) []byte {
	for _, p := range r.parts {
		b = append(b, p.enc...)
	}
	return b
}

// resultLabel is the messages_total label of a result.
func resultLabel(r *producerwire.Result) string {
	if producerv1.Storage(r.Storage) == producerv1.Storage_STORAGE_STORED {
		return statusFromProto(producerv1.Status(r.Status))
	}
	switch producerv1.Error(r.Error) {
	case producerv1.Error_ERROR_INVALID_MESSAGE:
		return "invalid_message"
	case producerv1.Error_ERROR_TOO_LARGE:
		return "too_large"
	case producerv1.Error_ERROR_SLAVE_WRITE_PROTECTED:
		return "slave"
	case producerv1.Error_ERROR_NOT_MASTER:
		return "not_master"
	case producerv1.Error_ERROR_FENCED:
		return "fenced"
	case producerv1.Error_ERROR_SHUTTING_DOWN:
		return "shutting_down"
	case producerv1.Error_ERROR_NO_SPACE:
		return "no_space"
	case producerv1.Error_ERROR_UNAVAILABLE:
		return "no_master"
	}
	return "internal"
}

func statusFromProto(s producerv1.Status) string {
	switch s {
	case producerv1.Status_PUT_OK:
		return core.PutOK.String()
	case producerv1.Status_FLUSH_DISK_TIMEOUT:
		return core.FlushDiskTimeout.String()
	case producerv1.Status_FLUSH_SLAVE_TIMEOUT:
		return core.FlushSlaveTimeout.String()
	case producerv1.Status_SLAVE_NOT_AVAILABLE:
		return core.SlaveNotAvailable.String()
	}
	return "UNKNOWN"
}

func statusToProto(s core.PutStatus) producerv1.Status {
	switch s {
	case core.PutOK:
		return producerv1.Status_PUT_OK
	case core.FlushDiskTimeout:
		return producerv1.Status_FLUSH_DISK_TIMEOUT
	case core.FlushSlaveTimeout:
		return producerv1.Status_FLUSH_SLAVE_TIMEOUT
	case core.SlaveNotAvailable:
		return producerv1.Status_SLAVE_NOT_AVAILABLE
	}
	return producerv1.Status_STATUS_UNSPECIFIED
}

// message builds the record message of m into msg, or the result
// refusing it (ok false).
func (ss *streamService) message(m *producerwire.Message, born netip.AddrPort, msg *record.Message) (refused producerwire.Result, ok bool) {
	refuse := func(e producerv1.Error, text string) (producerwire.Result, bool) {
		return producerwire.Result{Sequence: m.Sequence, Storage: int32(producerv1.Storage_STORAGE_NOT_STORED), Error: int32(e), Message: text}, false
	}
	if err := record.ValidateTopic(m.Topic); err != nil {
		return refuse(producerv1.Error_ERROR_INVALID_MESSAGE, err.Error())
	}
	if q := m.QueueID; q < 0 || q > MaxQueueID {
		return refuse(producerv1.Error_ERROR_INVALID_MESSAGE, fmt.Sprintf("invalid queue %d (want 0 to %d)", q, MaxQueueID))
	}
	if len(m.Body) == 0 {
		return refuse(producerv1.Error_ERROR_INVALID_MESSAGE, "empty body: a message needs a body")
	}
	if int64(len(m.Body)) > ss.s.cfg.MaxBodyBytes {
		return refuse(producerv1.Error_ERROR_TOO_LARGE, fmt.Sprintf("body of %d bytes is larger than the limit of %d bytes", len(m.Body), ss.s.cfg.MaxBodyBytes))
	}
	*msg = record.Message{Topic: m.Topic, QueueID: m.QueueID, Body: m.Body, BornHost: born}
	if p := m.Properties; len(p) > 0 {
		if _, err := record.EncodeProperties(p); err != nil {
			return refuse(producerv1.Error_ERROR_INVALID_MESSAGE, err.Error())
		}
		msg.Properties = p
	}
	if sh := ss.s.cfg.StoreHost; sh.Addr().Unmap().Is4() {
		msg.StoreHost = netip.AddrPortFrom(sh.Addr().Unmap(), sh.Port())
	}
	return producerwire.Result{}, true
}

// result answers a put of the backend.
func (ss *streamService) result(seq uint64, topic string, pr core.PutResult, err error) producerwire.Result {
	r := producerwire.Result{Sequence: seq}
	stored := func(st core.PutStatus) producerwire.Result {
		r.Storage, r.Status = int32(producerv1.Storage_STORAGE_STORED), int32(statusToProto(st))
		r.Offset, r.NextOffset, r.QueueOffset = pr.Offset, pr.NextOffset, pr.QueueOffset
		if ss.s.cfg.PutOrigin != nil {
			r.Epoch, r.BrokerID = ss.s.cfg.PutOrigin(pr)
		}
		return r
	}
	refuse := func(e producerv1.Error, msg string) producerwire.Result {
		r.Storage, r.Error, r.Message = int32(producerv1.Storage_STORAGE_NOT_STORED), int32(e), msg
		return r
	}
	switch {
	case err == nil:
		return stored(pr.Status)
	case errors.Is(err, store.ErrFlushDiskTimeout):
		return stored(core.FlushDiskTimeout)
	case errors.Is(err, core.ErrBatchAborted):
		// Not stored: the append of an earlier message of its batch
		// failed (its cause says why).
		e := producerv1.Error_ERROR_INTERNAL
		switch {
		case errors.Is(err, core.ErrClosed), errors.Is(err, store.ErrClosed):
			e = producerv1.Error_ERROR_SHUTTING_DOWN
		case errors.Is(err, syscall.ENOSPC):
			e = producerv1.Error_ERROR_NO_SPACE
		}
		return refuse(e, err.Error())
	case errors.Is(err, ErrNoMaster):
		// Before ErrNotMaster, which it wraps: no master to name.
		return refuse(producerv1.Error_ERROR_UNAVAILABLE, noMasterText(err))
	case errors.Is(err, core.ErrFenced) && pr.NextOffset > 0:
		r.Storage, r.Error = int32(producerv1.Storage_STORAGE_MAYBE), int32(producerv1.Error_ERROR_FENCED)
		r.Message = fmt.Sprintf("this master was fenced or demoted while the put waited for its slaves: the message is stored on this node at offset %d but may be cut when it follows another master", pr.Offset)
		r.Offset, r.NextOffset, r.QueueOffset = pr.Offset, pr.NextOffset, pr.QueueOffset
		return r
	case errors.Is(err, core.ErrFenced), errors.Is(err, core.ErrNotMaster):
		r = refuse(producerv1.Error_ERROR_NOT_MASTER, "this node is not the master (a slave, or demoted or fenced): the message was not stored; send it to the master")
		r.MasterAPI = ss.s.masterAPIOf(err)
		return r
	case errors.Is(err, core.ErrSlaveWriteProtected):
		r = refuse(producerv1.Error_ERROR_SLAVE_WRITE_PROTECTED, "this node is a slave; send writes to its master (slave write protection)")
		r.MasterAPI = ss.s.masterAPIOf(err)
		return r
	case errors.Is(err, store.ErrInvalidTopic), errors.Is(err, record.ErrInvalidTopic),
		errors.Is(err, record.ErrInvalidProperty), errors.Is(err, record.ErrInvalidHost):
		return refuse(producerv1.Error_ERROR_INVALID_MESSAGE, err.Error())
	case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, record.ErrTooLarge):
		return refuse(producerv1.Error_ERROR_TOO_LARGE, err.Error())
	case errors.Is(err, core.ErrClosed), errors.Is(err, store.ErrClosed):
		return refuse(producerv1.Error_ERROR_SHUTTING_DOWN, "the node is shutting down: the message was not stored")
	case pr.NextOffset > 0:
		// Stored, with an error about its replication (a cancelled wait).
		return stored(core.FlushSlaveTimeout)
	}
	if errors.Is(err, syscall.ENOSPC) {
		return refuse(producerv1.Error_ERROR_NO_SPACE, "the node's disk is full: "+err.Error())
	}
	ss.s.log.Error("stream put failed", "topic", topic, "error", err)
	r.Storage, r.Error, r.Message = int32(producerv1.Storage_STORAGE_MAYBE), int32(producerv1.Error_ERROR_INTERNAL), "put failed: "+err.Error()
	return r
}

// HTTP/2 settings of the API server.
const (
	// MaxConcurrentStreams bounds the HTTP/2 streams of one connection.
	MaxConcurrentStreams = 100
	// http2StreamWindow is the HTTP/2 receive buffer per stream.
	http2StreamWindow = 1 << 20
	// http2ConnWindow is the HTTP/2 receive buffer per connection.
	http2ConnWindow = 4 << 20
)

// streamProtocols are the API server's protocols: HTTP/1.1, HTTP/2 over TLS
// (ALPN h2) and cleartext HTTP/2 with prior knowledge (gRPC without TLS).
func streamProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

func streamHTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxConcurrentStreams:          MaxConcurrentStreams,
		MaxReceiveBufferPerStream:     http2StreamWindow,
		MaxReceiveBufferPerConnection: http2ConnWindow,
	}
}

// gatedBody bounds what gRPC's HTTP handler transport reads ahead of the
// stream: it reads the request body in a loop into an unbounded buffer, so
// Read blocks while the bytes read and not yet taken by Put (consume) reach
// window, and HTTP/2 flow control holds the client.
type gatedBody struct {
	body     io.ReadCloser
	window   int64
	mu       sync.Mutex
	read     int64
	consumed int64
	wake     chan struct{}
	closed   chan struct{}
	once     sync.Once
}

var errGateClosed = errors.New("api: producer stream closed")

func newGatedBody(body io.ReadCloser, window int64) *gatedBody {
	return &gatedBody{body: body, window: window, wake: make(chan struct{}), closed: make(chan struct{})}
}

func (g *gatedBody) Read(p []byte) (int, error) {
	for {
		g.mu.Lock()
		if room := g.window - (g.read - g.consumed); room > 0 {
			if int64(len(p)) > room {
				p = p[:room]
			}
			g.mu.Unlock()
			break
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-g.closed:
			return 0, errGateClosed
		}
	}
	n, err := g.body.Read(p)
	g.mu.Lock()
	g.read += int64(n)
	g.mu.Unlock()
	return n, err
}

// consume records that the stream took n bytes of gRPC frames.
func (g *gatedBody) consume(n int64) {
	g.mu.Lock()
	g.consumed += n
	close(g.wake)
	g.wake = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedBody) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.body.Close()
}
