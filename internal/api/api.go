package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// Property keys RocketMQ uses for tags and keys (MessageConst).
const (
	PropertyTags = "TAGS"
	PropertyKeys = "KEYS"
)

// PropertyHeader carries message properties on a put.
const PropertyHeader = "X-Replicator-Property"

// Defaults and bounds of the API.
const (
	DefaultMaxBodyBytes = 4 << 20 // RocketMQ maxMessageSize
	DefaultMaxReadBytes = 8 << 20
	DefaultReadCount    = 32
	MaxReadCount        = 1024
	MaxWait             = 30 * time.Second
	// MaxQueueID bounds the queue query parameter: RocketMQ's default topics
	// have 4 or 8 queues; 1024 is far above any real one and keeps the
	// store's per-queue state bounded against a careless client.
	MaxQueueID = 1023
)

// Backend is what the API serves: a master or a slave with its store.
// Methods are called concurrently.
type Backend interface {
	// Put stores a producer message (core.Master.Put, or a slave's, which
	// fails with core.ErrSlaveWriteProtected).
	Put(ctx context.Context, msg *record.Message) (core.PutResult, error)
	// PutBatch stores msgs in order, answering each as Put would have
	// (core.Master.PutBatch, core.Replica.PutBatch, member.Member.PutBatch).
	// The producer stream puts each batch it receives through it. The
	// messages' bodies are valid only until PutBatch returns: the stream
	// frees the received batch they alias then.
	PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut
	// ReadMessages decodes up to n records from offset (store.Store).
	ReadMessages(offset int64, n int) ([]record.Record, int64, error)
	// Bounds reports the store's offsets (store.Store).
	Bounds() store.Bounds
	// Watch signals ch when the max offset changes (store.Store).
	Watch(ch chan<- struct{}) (cancel func())
	// Status is the node's status without the store offsets, which the API
	// fills in from Bounds.
	Status() Status
}

// Status is the answer of GET /v1/status.
type Status struct {
	Role          string `json:"role"`
	MaxOffset     int64  `json:"max_offset"`
	MinOffset     int64  `json:"min_offset"`
	FlushedOffset int64  `json:"flushed_offset"`
	SegmentSize   int64  `json:"segment_size"`
	// HAAddr is a master's HA listen address.
	HAAddr string `json:"ha_addr,omitempty"`
	// Slaves is set (possibly empty) on a master.
	Slaves []SlaveStatus `json:"slaves,omitzero"`
	// Master is set on a slave.
	Master  *MasterLink `json:"master,omitempty"`
	Version string      `json:"version,omitempty"`
	// Protocol is the HA protocol: "classic" or "autoswitch". The fields
	// below it are autoswitch's (zero in classic mode).
	Protocol string `json:"protocol,omitempty"`
	BrokerID int64  `json:"broker_id,omitempty"`
	// Epoch is the last epoch of the node's epoch file, EpochEntries the
	// number of its entries.
	Epoch        int32 `json:"epoch,omitempty"`
	EpochEntries int   `json:"epoch_entries,omitempty"`
	// ConfirmOffset: every in-sync replica holds the bytes below it
	// (master: computed; slave: the master's, bounded by the local max).
	ConfirmOffset int64 `json:"confirm_offset,omitempty"`
	// InSync is a master's in-sync set (SyncStateSet): broker ids, itself
	// included.
	InSync []int64 `json:"in_sync,omitempty"`
	// ReadConfirmed: reads stop at the confirm offset (--read-confirmed).
	ReadConfirmed bool `json:"read_confirmed,omitempty"`
	// Fenced is a fenced master's reason (it refuses puts).
	Fenced string `json:"fenced,omitempty"`
	// Controller mode (replicator node): the node's group, the group's
	// master (MasterBrokerID -1 when it has none) and its API base URL,
	// and the node's registration with the controller.
	Group          string            `json:"group,omitempty"`
	MasterBrokerID *int64            `json:"master_broker_id,omitempty"`
	MasterAPI      string            `json:"master_api,omitempty"`
	Controller     *ControllerStatus `json:"controller,omitempty"`
}

// ControllerStatus is a controller-mode node's view of its controller.
type ControllerStatus struct {
	// Registered: the node holds a registration (on its etcd lease).
	Registered bool `json:"registered"`
	// LeaseValid: the lease is valid by the node's local deadline (a
	// master without it refuses puts).
	LeaseValid bool `json:"lease_valid"`
	// NoMasterReason says why the group has no master ("" when it has
	// one).
	NoMasterReason string `json:"no_master_reason,omitempty"`
	// InSyncEpoch is the epoch of the group's confirmed in-sync set.
	InSyncEpoch int32 `json:"in_sync_epoch,omitempty"`
}

// SlaveStatus is a master's view of one slave.
type SlaveStatus struct {
	Addr          string `json:"addr"`
	AckOffset     int64  `json:"ack_offset"`
	LagBytes      int64  `json:"lag_bytes"`
	LastAckMsAgo  int64  `json:"last_ack_ms_ago"` // -1 before the first ack
	RequestOffset int64  `json:"request_offset"`
	OutOfRange    bool   `json:"out_of_range,omitempty"`
	// Autoswitch: the slave's broker id, its connection's handshake state
	// (HANDSHAKE, TRANSFER, ...) and whether it is in the in-sync set.
	BrokerID       int64  `json:"broker_id,omitempty"`
	HandshakeState string `json:"handshake_state,omitempty"`
	InSync         bool   `json:"in_sync,omitempty"`
}

// MasterLink is a slave's view of its master.
type MasterLink struct {
	Addr         string `json:"addr"`
	Connected    bool   `json:"connected"`
	AckSent      int64  `json:"ack_sent"`
	LastError    string `json:"last_error,omitempty"`
	SegmentError string `json:"segment_error,omitempty"`
	Reconnects   int64  `json:"reconnects"`
	// LastFrameMsAgo is the time since the last frame from the master, -1
	// before the first one.
	LastFrameMsAgo int64 `json:"last_frame_ms_ago"`
	// Autoswitch: the connection's handshake state (READY, HANDSHAKE,
	// TRANSFER); Unhealthy is set while the slave refuses to replicate from
	// this master (its epochs share no consistent point with this log, ...)
	// and appends nothing; LastTruncation is the last cut made to reach the
	// consistent point.
	HandshakeState string      `json:"handshake_state,omitempty"`
	Unhealthy      string      `json:"unhealthy,omitempty"`
	LastTruncation *Truncation `json:"last_truncation,omitempty"`
	// Diverged (classic) is set while the master's API (--master-api)
	// says its log ends below this slave's max offset: this log is longer
	// or diverged, and the master sends heartbeats only.
	Diverged string `json:"diverged,omitempty"`
}

// Truncation is a cut a slave made to its log to reach the consistent
// point with its master's: [From, To) removed.
type Truncation struct {
	From    int64 `json:"from"`
	To      int64 `json:"to"`
	Bytes   int64 `json:"bytes"`
	Records int64 `json:"records"`
	// MsAgo is the time since the cut.
	MsAgo int64 `json:"ms_ago"`
}

// PutAnswer is the answer of a put.
type PutAnswer struct {
	Status      string `json:"status"`
	Offset      int64  `json:"offset"`
	NextOffset  int64  `json:"next_offset"`
	QueueOffset int64  `json:"queue_offset"`
	// Epoch and BrokerID (autoswitch nodes): the master epoch the put was
	// stored and acknowledged in, and the acknowledging node's broker id.
	Epoch    int32 `json:"epoch,omitempty"`
	BrokerID int64 `json:"broker_id,omitempty"`
}

// Message is one record in the answer of GET /v1/messages.
type Message struct {
	Offset         int64             `json:"offset"`
	Size           int32             `json:"size"`
	Topic          string            `json:"topic"`
	QueueID        int32             `json:"queue_id"`
	QueueOffset    int64             `json:"queue_offset"`
	Tags           string            `json:"tags,omitempty"`
	Keys           string            `json:"keys,omitempty"`
	Properties     map[string]string `json:"properties,omitempty"`
	Body           []byte            `json:"body"`
	BodyCRC        uint32            `json:"body_crc"`
	Flag           int32             `json:"flag"`
	SysFlag        int32             `json:"sys_flag"`
	BornTimestamp  int64             `json:"born_timestamp"`
	StoreTimestamp int64             `json:"store_timestamp"`
	BornHost       string            `json:"born_host,omitempty"`
	StoreHost      string            `json:"store_host,omitempty"`
}

// Messages is the answer of GET /v1/messages.
type Messages struct {
	Messages   []Message `json:"messages"`
	NextOffset int64     `json:"next_offset"`
	MaxOffset  int64     `json:"max_offset"`
}

// ErrorAnswer is the body of every error answer.
type ErrorAnswer struct {
	Error string `json:"error"`
	// MasterAPI is the master's API base URL in a slave's 403 answer to a
	// put, when the slave knows it.
	MasterAPI string `json:"master_api,omitempty"`
	// Stored, in a 503 answer to a put that a master refused or failed
	// while it was fenced, demoted or without a group master: "no" (the
	// message was not stored: send it again) or "maybe" (stored on this
	// node, and cut if it rejoins a new master that does not hold it).
	Stored string `json:"stored,omitempty"`
}

// Values of ErrorAnswer.Stored.
const (
	StoredNo    = "no"
	StoredMaybe = "maybe"
)

// ErrNoMaster is a put refused because the node's group has no master it
// can send the put to (controller mode: no master elected, or a master
// this node does not follow yet). It answers 503, not stored.
var ErrNoMaster = errors.New("no master to take the put")

// RedirectError is a put refused by a node that is not the master (it
// wraps core.ErrSlaveWriteProtected or core.ErrNotMaster), naming the
// master's API base URL as the node knew it when it refused the put. A
// Backend returns it when its master can change between the put and a
// later Config.MasterAPI call (controller mode): the answer then names the
// master the refusal was decided against.
type RedirectError struct {
	MasterAPI string
	Err       error
}

func (e *RedirectError) Error() string { return e.Err.Error() }

// Unwrap is Err.
func (e *RedirectError) Unwrap() error { return e.Err }

// masterAPIOf is the master's API base URL for a put refused with err: the
// RedirectError's, else Config.MasterAPI's ("" when unknown).
func (s *Server) masterAPIOf(err error) string {
	if re, ok := errors.AsType[*RedirectError](err); ok {
		return re.MasterAPI
	}
	if s.cfg.MasterAPI != nil {
		return s.cfg.MasterAPI()
	}
	return ""
}

// Config configures a Server.
type Config struct {
	Backend Backend // REQUIRED
	// Gatherer serves /metrics; nil serves an empty exposition.
	Gatherer prometheus.Gatherer
	// Registerer receives the HTTP metrics; nil registers none.
	Registerer   prometheus.Registerer
	Logger       hclog.Logger // nil: no logs
	MaxBodyBytes int64        // put body limit (default DefaultMaxBodyBytes)
	MaxReadBytes int          // bodies per GET /v1/messages answer (default DefaultMaxReadBytes)
	// StoreHost is recorded as the messages' store host (IPv4 only; zero: none).
	StoreHost netip.AddrPort
	Version   string
	// Now is the clock for "ms ago" fields; nil means time.Now.
	Now func() time.Time
	// Roles serves POST /v1/role (runtime role changes, autoswitch mode);
	// nil answers 409 (classic mode).
	Roles RoleChanger
	// ReadLimit, when set, bounds reads (GET /v1/messages): only records
	// that end at or below ReadLimit() are served, as if the log ended
	// there (a slave with --read-confirmed: the confirm offset). Status
	// keeps the store's true offsets.
	ReadLimit func() int64
	// Token, when not empty, is the bearer token every route except
	// /healthz and /readyz requires (Authorization: Bearer <token>);
	// other requests answer 401 with a JSON message. Compared in constant
	// time.
	Token string
	// MasterAPI returns a slave's master's API base URL ("" when unknown),
	// sent with the 403 answer to a put (body and Location header) and
	// with the producer stream's SLAVE_WRITE_PROTECTED and NOT_MASTER
	// results (master_api), unless the put's error is a RedirectError,
	// whose MasterAPI is sent instead; nil: unknown.
	MasterAPI func() string
	// PutOrigin, when set, names the master epoch and the broker id a
	// stored put was acknowledged in (autoswitch), for the put's answer.
	PutOrigin func(res core.PutResult) (epoch int32, brokerID int64)
	// Stream bounds the producer stream (stream.go); zero fields take the
	// defaults.
	Stream StreamLimits
}

// Server is the API's http.Handler. Safe for concurrent use.
type Server struct {
	cfg      Config
	log      hclog.Logger
	mux      *http.ServeMux
	ready    atomic.Bool
	drain    chan struct{}
	drainOne sync.Once
	reqs     *prometheus.CounterVec
	dur      *prometheus.HistogramVec
	authFail *prometheus.CounterVec
	rejected prometheus.Counter
	health   *health  // health.go: disk full, put-failure log limit
	token    [32]byte // SHA-256 of Config.Token
	stream   *streamService
	fallback fallback
}

// New returns the API handler. It answers /readyz with 503 until SetReady(true).
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("api: Config.Backend is required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxReadBytes <= 0 {
		cfg.MaxReadBytes = DefaultMaxReadBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), drain: make(chan struct{}), health: newHealth(cfg.Now),
		fallback: fallback{routes: map[string]string{}, notAllowed: map[string]http.Handler{}}}
	s.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_http_requests_total",
		Help: "HTTP API requests by route and status code.",
	}, []string{"route", "code"})
	s.dur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "replicator_http_request_duration_seconds",
		Help:    "HTTP API request latency by route.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route"})
	s.authFail = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_http_auth_failures_total",
		Help: "API requests refused with 401, by reason: missing (no bearer token) or invalid (wrong token).",
	}, []string{"reason"})
	s.rejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "replicator_http_rejected_paths_total",
		Help: "API requests refused with 400 before routing: a path that is not clean, not UTF-8 or holds control characters.",
	})
	if cfg.Token != "" {
		s.token = sha256.Sum256([]byte(cfg.Token))
	}
	if err := s.registerServerMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	s.HandleFunc("POST /v1/topics/{topic}/messages", "put", s.put)
	s.HandleFunc("GET /v1/messages", "messages", s.messages)
	s.HandleFunc("GET /v1/status", "status", s.status)
	s.HandleFunc("POST /v1/role", "role", s.role)
	gatherer := cfg.Gatherer
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	s.Handle("GET /metrics", "metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      promLogger{s.log},
	}))
	s.HandleFunc("GET /healthz", "healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.HandleFunc("GET /readyz", "readyz", s.readyz)
	s.stream = newStreamService(s)
	if err := s.stream.registerMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	s.Handle(StreamPath, "stream", s.stream)
	s.fallback.notFound = s.instrument("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	}))
	s.mux.HandleFunc("/", s.serveFallback)
	return s, nil
}

// Handle mounts h at pattern, a net/http ServeMux pattern, with the
// metrics label route, behind the token check (Config.Token) unless the
// route is open. A pattern with a method ("POST /v1/role") takes that
// method (GET also HEAD); a pattern without one ("/v1/metadata/") takes
// every method and its handler checks them. A request that no pattern
// takes answers 405 with an Allow header and a JSON error when patterns
// with other methods match its path (counted under the route of the first
// of them), else 404 (route "other"). Extensions (such as the metadata
// plugin) add their routes this way before the server starts serving.
func (s *Server) Handle(pattern, route string, h http.Handler) {
	s.mux.Handle(pattern, s.instrument(route, h))
	method, _, ok := strings.Cut(pattern, " ")
	if !ok {
		return
	}
	s.fallback.mu.Lock()
	defer s.fallback.mu.Unlock()
	f := &s.fallback
	if !slices.Contains(f.methods, method) {
		f.methods = append(f.methods, method)
	}
	f.routes[pattern] = route
	if _, ok := f.notAllowed[route]; !ok {
		f.notAllowed[route] = s.instrument(route, http.HandlerFunc(notAllowed))
	}
}

// HandleFunc is Handle for a handler function.
func (s *Server) HandleFunc(pattern, route string, h func(http.ResponseWriter, *http.Request)) {
	s.Handle(pattern, route, http.HandlerFunc(h))
}

// instrument wraps h with the token check and the route's metrics.
func (s *Server) instrument(route string, h http.Handler) http.Handler {
	reqs := s.reqs.MustCurryWith(prometheus.Labels{"route": route})
	dur := s.dur.MustCurryWith(prometheus.Labels{"route": route})
	if s.cfg.Token != "" && !openRoutes[route] {
		h = s.authenticate(h)
	}
	return promhttp.InstrumentHandlerCounter(reqs, promhttp.InstrumentHandlerDuration(dur, h))
}

// fallback answers what no pattern took (mounted at "/"): 405 when
// patterns with other methods match the path, else 404.
type fallback struct {
	mu sync.Mutex
	// methods are the methods of the method patterns.
	methods []string
	// routes maps each method pattern to its route label.
	routes map[string]string
	// notAllowed is each route's instrumented 405 answer.
	notAllowed map[string]http.Handler
	notFound   http.Handler
}

// allowKey carries a 405 answer's Allow value to notAllowed.
type allowKey struct{}

func (s *Server) serveFallback(w http.ResponseWriter, r *http.Request) {
	f := &s.fallback
	f.mu.Lock()
	methods := f.methods
	f.mu.Unlock()
	var allow []string
	route, redirect := "", false
	probe := *r
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		probe.Method = m
		_, pat := s.mux.Handler(&probe)
		f.mu.Lock()
		rt, ok := f.routes[pat]
		f.mu.Unlock()
		switch {
		case !ok:
		case patternPath(pat) == r.URL.Path+"/":
			// ServeMux would redirect m to the path with a slash.
			redirect = true
		default:
			allow = append(allow, m)
			if route == "" {
				route = rt
			}
		}
	}
	if len(allow) == 0 {
		if redirect {
			// As ServeMux redirects GET /debug/pprof to /debug/pprof/:
			// whatever the method, the answer there says which it takes.
			u := url.URL{Path: r.URL.Path + "/", RawQuery: r.URL.RawQuery}
			http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
			return
		}
		f.notFound.ServeHTTP(w, r)
		return
	}
	slices.Sort(allow) // as ServeMux's Allow
	f.mu.Lock()
	h := f.notAllowed[route]
	f.mu.Unlock()
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), allowKey{}, strings.Join(allow, ", "))))
}

// patternPath is the path of a ServeMux pattern ("GET /a/" -> "/a/").
func patternPath(pat string) string {
	if _, p, ok := strings.Cut(pat, " "); ok {
		return strings.TrimSpace(p)
	}
	return pat
}

// notAllowed is the 405 answer, behind a route's token check and metrics.
func notAllowed(w http.ResponseWriter, r *http.Request) {
	allow, _ := r.Context().Value(allowKey{}).(string)
	w.Header().Set("Allow", allow)
	WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed (use %s)", r.Method, allow))
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	if msg := checkPath(r); msg != "" {
		s.rejected.Inc()
		WriteError(sw, http.StatusBadRequest, msg)
	} else {
		s.mux.ServeHTTP(sw, r)
	}
	if s.log.IsDebug() {
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "code", sw.code, "remote", r.RemoteAddr, "duration", s.cfg.Now().Sub(start))
	}
}

// SetReady sets the answer of /readyz.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Drain marks the server not ready and ends pending long polls, so that
// http.Server.Shutdown does not wait for them. Idempotent.
func (s *Server) Drain() {
	s.ready.Store(false)
	s.drainOne.Do(func() { close(s.drain) })
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.drain:
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	default:
	}
	if !s.ready.Load() {
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	s.readyChecks(w, r)
}

func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	msg, code, err := s.parsePut(w, r)
	if err != nil {
		WriteError(w, code, err.Error())
		return
	}
	res, err := s.cfg.Backend.Put(r.Context(), msg)
	if errors.Is(err, core.ErrFenced) {
		ans := ErrorAnswer{Error: fencedPutError(res) + " (" + err.Error() + ")", Stored: StoredNo}
		if res.NextOffset > 0 {
			ans.Stored = StoredMaybe
		}
		WriteJSON(w, http.StatusServiceUnavailable, ans)
		return
	}
	if errors.Is(err, ErrNoMaster) {
		WriteJSON(w, http.StatusServiceUnavailable, ErrorAnswer{Error: noMasterText(err), Stored: StoredNo})
		return
	}
	if err != nil && !errors.Is(err, store.ErrFlushDiskTimeout) {
		code, text := putErrorCode(err)
		if code >= 500 && !errors.Is(err, core.ErrClosed) {
			s.logPutFailure(msg.Topic, err)
		}
		ans := ErrorAnswer{Error: text}
		if errors.Is(err, core.ErrSlaveWriteProtected) {
			ans.MasterAPI = s.masterAPIOf(err)
			if ans.MasterAPI != "" {
				w.Header().Set("Location", strings.TrimSuffix(ans.MasterAPI, "/")+r.URL.RequestURI())
			}
		}
		WriteJSON(w, code, ans)
		return
	}
	s.health.putStored()
	status := res.Status
	if errors.Is(err, store.ErrFlushDiskTimeout) {
		status = core.FlushDiskTimeout
	}
	ans := PutAnswer{
		Status:      status.String(),
		Offset:      res.Offset,
		NextOffset:  res.NextOffset,
		QueueOffset: res.QueueOffset,
	}
	if s.cfg.PutOrigin != nil {
		ans.Epoch, ans.BrokerID = s.cfg.PutOrigin(res)
	}
	WriteJSON(w, http.StatusOK, ans)
}

// noMasterText is the error text of a put refused with ErrNoMaster.
func noMasterText(err error) string {
	return "the message was not stored: " + err.Error() + "; send it again later"
}

func putErrorCode(err error) (int, string) {
	switch {
	case errors.Is(err, core.ErrSlaveWriteProtected), errors.Is(err, core.ErrNotMaster):
		return http.StatusForbidden, "this node is a slave; send writes to its master (slave write protection)"
	case errors.Is(err, store.ErrInvalidTopic), errors.Is(err, record.ErrInvalidTopic),
		errors.Is(err, record.ErrInvalidProperty), errors.Is(err, record.ErrInvalidHost):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, record.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, core.ErrClosed), errors.Is(err, store.ErrClosed):
		return http.StatusServiceUnavailable, "the node is shutting down"
	case IsDiskFull(err):
		return http.StatusInsufficientStorage, diskFullAnswer + " (" + err.Error() + ")"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "request cancelled: " + err.Error()
	}
	return http.StatusInternalServerError, "put failed: " + err.Error()
}

// parsePut builds the message of a put request, or says why it cannot.
func (s *Server) parsePut(w http.ResponseWriter, r *http.Request) (*record.Message, int, error) {
	topic := r.PathValue("topic")
	if err := record.ValidateTopic(topic); err != nil {
		return nil, http.StatusBadRequest, err
	}
	msg := &record.Message{Topic: topic}
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "queue", "tags", "keys":
			if len(v) > 1 {
				return nil, http.StatusBadRequest, fmt.Errorf("query parameter %q given %d times", k, len(v))
			}
		default:
			return nil, http.StatusBadRequest, fmt.Errorf("unknown query parameter %q (want queue, tags or keys)", k)
		}
	}
	if v := q.Get("queue"); v != "" || q.Has("queue") {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 || n > MaxQueueID {
			return nil, http.StatusBadRequest, fmt.Errorf("invalid queue %q (want 0 to %d)", v, MaxQueueID)
		}
		msg.QueueID = int32(n)
	}
	props := map[string]string{}
	for _, hv := range r.Header.Values(PropertyHeader) {
		for _, item := range strings.Split(hv, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			rawK, rawV, ok := strings.Cut(item, "=")
			if !ok {
				return nil, http.StatusBadRequest, fmt.Errorf("%s: %q is not name=value", PropertyHeader, item)
			}
			k, err1 := url.QueryUnescape(strings.TrimSpace(rawK))
			v, err2 := url.QueryUnescape(strings.TrimSpace(rawV))
			if err1 != nil || err2 != nil {
				return nil, http.StatusBadRequest, fmt.Errorf("%s: %q has a bad %%-escape", PropertyHeader, item)
			}
			if _, dup := props[k]; dup {
				return nil, http.StatusBadRequest, fmt.Errorf("%s: property %q given twice", PropertyHeader, k)
			}
			props[k] = v
		}
	}
	for param, key := range map[string]string{"tags": PropertyTags, "keys": PropertyKeys} {
		if !q.Has(param) {
			continue
		}
		if _, dup := props[key]; dup {
			return nil, http.StatusBadRequest, fmt.Errorf("%s given both as query parameter %q and as property %q", param, param, key)
		}
		props[key] = q.Get(param)
	}
	if len(props) > 0 {
		if _, err := record.EncodeProperties(props); err != nil {
			return nil, http.StatusBadRequest, err
		}
		msg.Properties = props
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body of %d bytes is larger than the limit of %d bytes", r.ContentLength, s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body is larger than the limit of %d bytes", s.cfg.MaxBodyBytes)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading body: %w", err)
	}
	if len(body) == 0 {
		return nil, http.StatusBadRequest, errors.New("empty body: a message needs a body")
	}
	msg.Body = body
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && ap.Addr().Unmap().Is4() {
		msg.BornHost = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if s.cfg.StoreHost.Addr().Unmap().Is4() {
		msg.StoreHost = netip.AddrPortFrom(s.cfg.StoreHost.Addr().Unmap(), s.cfg.StoreHost.Port())
	}
	return msg, 0, nil
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "offset", "max", "wait":
			if len(v) > 1 {
				WriteError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %q given %d times", k, len(v)))
				return
			}
		default:
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q (want offset, max or wait)", k))
			return
		}
	}
	b := s.readBounds()
	offset := b.Min
	if q.Has("offset") {
		n, err := strconv.ParseInt(q.Get("offset"), 10, 64)
		if err != nil || n < 0 {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid offset %q (want a physical offset, 0 or more)", q.Get("offset")))
			return
		}
		offset = n
	}
	count := DefaultReadCount
	if q.Has("max") {
		n, err := strconv.Atoi(q.Get("max"))
		if err != nil || n < 1 || n > MaxReadCount {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid max %q (want 1 to %d)", q.Get("max"), MaxReadCount))
			return
		}
		count = n
	}
	var wait time.Duration
	if q.Has("wait") {
		d, err := time.ParseDuration(q.Get("wait"))
		if err != nil || d < 0 || d > MaxWait {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid wait %q (want a duration up to %s, like 10s)", q.Get("wait"), MaxWait))
			return
		}
		wait = d
	}
	if offset < b.Min || offset > b.Max {
		WriteError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("offset %d is outside the log [%d, %d]", offset, b.Min, b.Max))
		return
	}
	if wait > 0 && offset >= b.Max {
		s.waitFor(r.Context(), offset, wait)
	}
	recs, next, err := s.cfg.Backend.ReadMessages(offset, count)
	if err == nil && s.cfg.ReadLimit != nil {
		recs, next = limitRecords(recs, next, s.readBounds().Max)
	}
	if err != nil {
		switch {
		case errors.Is(err, store.ErrOffsetOutOfRange):
			b := s.readBounds()
			WriteError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("offset %d is outside the log [%d, %d]", offset, b.Min, b.Max))
		case errors.Is(err, store.ErrNotBoundary), errors.Is(err, record.ErrBadMagic), errors.Is(err, record.ErrBadLength):
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("offset %d is not the start of a record: %v", offset, err))
		case errors.Is(err, store.ErrClosed):
			WriteError(w, http.StatusServiceUnavailable, "the node is shutting down")
		default:
			s.log.Error("read failed", "offset", offset, "error", err)
			WriteError(w, http.StatusInternalServerError, "read failed: "+err.Error())
		}
		return
	}
	ans := Messages{Messages: make([]Message, 0, len(recs)), NextOffset: next}
	total := 0
	for i := range recs {
		rec := &recs[i]
		if i > 0 && total+len(rec.Body) > s.cfg.MaxReadBytes {
			ans.NextOffset = rec.PhysicalOffset
			break
		}
		total += len(rec.Body)
		ans.Messages = append(ans.Messages, toMessage(rec))
	}
	if len(recs) == 0 && next < offset {
		ans.NextOffset = offset
	}
	ans.MaxOffset = s.readBounds().Max
	WriteJSON(w, http.StatusOK, ans)
}

// readBounds are the store's bounds with Max lowered to Config.ReadLimit.
func (s *Server) readBounds() store.Bounds {
	b := s.cfg.Backend.Bounds()
	if s.cfg.ReadLimit != nil {
		b.Max = min(b.Max, max(s.cfg.ReadLimit(), b.Min))
	}
	return b
}

// limitRecords keeps the records that end at or below limit; next becomes
// the end of the last one kept.
func limitRecords(recs []record.Record, next, limit int64) ([]record.Record, int64) {
	for i := range recs {
		if end := recs[i].PhysicalOffset + int64(recs[i].TotalSize); end > limit {
			if i == 0 {
				return recs[:0], recs[0].PhysicalOffset
			}
			return recs[:i], recs[i].PhysicalOffset
		}
	}
	return recs, min(next, max(limit, 0))
}

// readLimitPoll is how often a long poll looks at Config.ReadLimit.
const readLimitPoll = 20 * time.Millisecond

// waitFor blocks until the max offset passes offset, d passes, the request
// ends or the server drains.
func (s *Server) waitFor(ctx context.Context, offset int64, d time.Duration) {
	ch := make(chan struct{}, 1)
	cancel := s.cfg.Backend.Watch(ch)
	defer cancel()
	t := time.NewTimer(d)
	defer t.Stop()
	// The read limit (a slave's confirm offset) moves without the store
	// signalling: look at it again every readLimitPoll.
	var tick <-chan time.Time
	if s.cfg.ReadLimit != nil {
		tk := time.NewTicker(readLimitPoll)
		defer tk.Stop()
		tick = tk.C
	}
	for s.readBounds().Max <= offset {
		select {
		case <-tick:
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-s.drain:
			return
		}
	}
}

func toMessage(rec *record.Record) Message {
	m := Message{
		Offset:         rec.PhysicalOffset,
		Size:           rec.TotalSize,
		Topic:          rec.Topic,
		QueueID:        rec.QueueID,
		QueueOffset:    rec.QueueOffset,
		Tags:           rec.Properties[PropertyTags],
		Keys:           rec.Properties[PropertyKeys],
		Properties:     rec.Properties,
		Body:           rec.Body,
		BodyCRC:        rec.BodyCRC,
		Flag:           rec.Flag,
		SysFlag:        rec.SysFlag,
		BornTimestamp:  rec.BornTimestamp,
		StoreTimestamp: rec.StoreTimestamp,
	}
	if m.Body == nil {
		m.Body = []byte{}
	}
	if rec.BornHost.IsValid() {
		m.BornHost = rec.BornHost.String()
	}
	if rec.StoreHost.IsValid() {
		m.StoreHost = rec.StoreHost.String()
	}
	return m
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		WriteError(w, http.StatusBadRequest, "status takes no query parameters")
		return
	}
	WriteJSON(w, http.StatusOK, s.statusAnswer())
}

// statusAnswer is the answer of GET /v1/status (and of POST /v1/role).
func (s *Server) statusAnswer() Status {
	st := s.cfg.Backend.Status()
	b := s.cfg.Backend.Bounds()
	st.MaxOffset, st.MinOffset, st.FlushedOffset, st.SegmentSize = b.Max, b.Min, b.Flushed, b.SegmentSize
	if st.Version == "" {
		st.Version = s.cfg.Version
	}
	return st
}

// WriteJSON writes v as a JSON answer with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorAnswer{Error: "encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// WriteError writes {"error": msg} with code.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, ErrorAnswer{Error: msg})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush is http.Flusher, which the producer stream (gRPC) needs.
func (w *statusWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

type promLogger struct{ l hclog.Logger }

func (p promLogger) Println(v ...any) { p.l.Error("metrics", "error", fmt.Sprint(v...)) }
