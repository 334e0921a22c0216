package metadata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// RemotingSourceConfig configures NewRemotingSource.
type RemotingSourceConfig struct {
	// Addr is the master's remoting address, host:port. REQUIRED.
	Addr string
	// Dial opens the connection (the daemon passes the tcp transport's, for
	// TLS); nil means plain TCP with a 5 s connect timeout.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// MaxFrameSize bounds an answer frame (0: remoting.DefaultMaxFrameSize,
	// RocketMQ's 16 MiB).
	MaxFrameSize int
	// CallTimeout bounds each request (0: remoting.DefaultCallTimeout, the
	// 3 s of RocketMQ's slave).
	CallTimeout time.Duration
	// Serialize is the header serialisation of the requests (the zero value
	// is JSON, RocketMQ's default).
	Serialize remoting.SerializeType
}

// RemotingSource is a Source that reads a RocketMQ (or replicator) master's
// metadata over the remoting protocol, as RocketMQ's slave does
// (SlaveSynchronize): List connects, sends the request of every
// RemotingDocuments entry in turn on one connection, decodes each answer
// (fastjson's unquoted integer keys accepted) and keeps the documents for
// the Get calls that follow, so a round costs one connection and one
// request per document. An answer in a document's AbsentCodes (a RocketMQ 4.x master's
// REQUEST_CODE_NOT_SUPPORTED to the 5.x codes) means the master has no
// such document; any other failure fails the List (ErrBadResponse for a malformed or
// unsuccessful answer). The topic document is stored as RocketMQ's
// topics.json holds it: dataVersion and topicConfigTable, without the 5.x
// static-topic mapping members of the answer (mappingDataVersion,
// topicQueueMappingInfoMap, topicQueueMappingDetailMap). Safe for
// concurrent use.
type RemotingSource struct {
	cfg RemotingSourceConfig

	mu   sync.Mutex
	docs map[string]meta.Document
}

var _ meta.Source = (*RemotingSource)(nil)

// NewRemotingSource validates cfg. It does not connect.
func NewRemotingSource(cfg RemotingSourceConfig) (*RemotingSource, error) {
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("metadata: remoting address %q: %w", cfg.Addr, err)
	}
	if cfg.MaxFrameSize < 0 || cfg.CallTimeout < 0 {
		return nil, errors.New("metadata: negative MaxFrameSize or CallTimeout")
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = remoting.DefaultCallTimeout
	}
	if cfg.Serialize != remoting.JSON && cfg.Serialize != remoting.ROCKETMQ {
		return nil, fmt.Errorf("metadata: unknown serialize type %d", cfg.Serialize)
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return &RemotingSource{cfg: cfg}, nil
}

// mappingMembers are the 5.x TopicConfigAndMappingSerializeWrapper members
// that RocketMQ keeps out of topics.json.
var mappingMembers = []string{"mappingDataVersion", "topicQueueMappingInfoMap", "topicQueueMappingDetailMap"}

// List fetches every document from the master.
func (s *RemotingSource) List(ctx context.Context) ([]meta.Entry, error) {
	conn, err := s.cfg.Dial(ctx, s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("metadata: connect to the master's remoting port %s: %w", s.cfg.Addr, err)
	}
	cl := remoting.NewClient(conn, s.cfg.MaxFrameSize)
	defer cl.Close()
	docs := make(map[string]meta.Document, len(RemotingDocuments))
	for _, d := range RemotingDocuments {
		doc, ok, err := s.fetch(ctx, cl, d)
		if err != nil {
			return nil, err
		}
		if ok {
			docs[d.Name] = doc
		}
	}
	s.mu.Lock()
	s.docs = docs
	s.mu.Unlock()
	out := make([]meta.Entry, 0, len(docs))
	for _, d := range docs {
		out = append(out, meta.Entry{Name: d.Name, Version: d.Version})
	}
	slices.SortFunc(out, func(a, b meta.Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *RemotingSource) fetch(ctx context.Context, cl *remoting.Client, d RemotingDocument) (meta.Document, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	name := remoting.CodeName(d.Code)
	resp, err := cl.Invoke(cctx, &remoting.Command{Code: d.Code, Language: remoting.LanguageGo, Serialize: s.cfg.Serialize})
	if err != nil {
		return meta.Document{}, false, fmt.Errorf("metadata: %s from %s: %w", name, s.cfg.Addr, err)
	}
	switch {
	case resp.Code == remoting.Success:
	case slices.Contains(d.AbsentCodes, resp.Code):
		return meta.Document{}, false, nil // e.g. a 4.x master and a 5.x code
	default:
		return meta.Document{}, false, fmt.Errorf("%w: %s from %s: response code %d: %s", ErrBadResponse, name, s.cfg.Addr, resp.Code, truncate(resp.Remark))
	}
	if len(bytes.TrimSpace(resp.Body)) == 0 {
		return meta.Document{}, false, fmt.Errorf("%w: %s from %s: SUCCESS without a body", ErrBadResponse, name, s.cfg.Addr)
	}
	v, body, err := DecodeDocument(resp.Body)
	if err != nil {
		return meta.Document{}, false, fmt.Errorf("%w: %s from %s: %v", ErrBadResponse, name, s.cfg.Addr, err)
	}
	if d.Name == TopicsName {
		if body, err = dropMembers(body, mappingMembers); err != nil {
			return meta.Document{}, false, fmt.Errorf("%w: %s from %s: %v", ErrBadResponse, name, s.cfg.Addr, err)
		}
	}
	return meta.Document{Name: d.Name, Version: v, Body: body}, true, nil
}

func dropMembers(body []byte, names []string) ([]byte, error) {
	members, err := objectMembers(body)
	if err != nil {
		return nil, err
	}
	kept := members[:0]
	for _, m := range members {
		if !slices.Contains(names, m.key) {
			kept = append(kept, m)
		}
	}
	return buildObject(kept, len(body)), nil
}

// Get returns a document fetched by the last List (ErrNotFound if the
// master had none, or before any List).
func (s *RemotingSource) Get(ctx context.Context, name string) (meta.Document, error) {
	if err := ctx.Err(); err != nil {
		return meta.Document{}, err
	}
	s.mu.Lock()
	d, ok := s.docs[name]
	s.mu.Unlock()
	if !ok {
		return meta.Document{}, fmt.Errorf("%w: %q (not fetched from %s)", meta.ErrNotFound, name, s.cfg.Addr)
	}
	d.Body = slices.Clone(d.Body)
	return d, nil
}

// UnversionedNames are the documents SlaveSynchronize takes every round
// without a DataVersion check: consumer offsets (merged), delay offsets
// and message request modes (replaced). RocketMQ 4.x sends no DataVersion
// with the first two, and a 5.x master does not bump the consumer
// offsets' version on every commit, so a version check would miss
// changes.
func UnversionedNames() []string {
	var out []string
	for _, d := range RemotingDocuments {
		if !d.Versioned {
			out = append(out, d.Name)
		}
	}
	return out
}

// unknownVersion is reported for documents whose version must not be
// compared: no master sends it (RocketMQ timestamps and counters are not
// negative), so the Syncer always fetches them.
var unknownVersion = meta.DataVersion{StateVersion: math.MinInt64, Timestamp: math.MinInt64, Counter: math.MinInt64}

// TakeEveryRound wraps a slave's local store so that a Syncer takes the
// named documents from the master at every round, as SlaveSynchronize does
// (see UnversionedNames), instead of only when their DataVersion differs:
// List reports them with a version no master sends. Apply skips a named
// document whose version and body equal the local copy, so an unchanged
// master costs no write. The wrapper deletes nothing (it hides a Deleter):
// RocketMQ's slave never removes a config file, and a remoting master
// serves only RemotingDocuments, so the slave's other files must stay.
// Everything else passes through.
func TakeEveryRound(local LocalStore, names ...string) LocalStore {
	return &everyRound{LocalStore: local, names: slices.Clone(names)}
}

type everyRound struct {
	LocalStore
	names []string
}

func (e *everyRound) List(ctx context.Context) ([]meta.Entry, error) {
	es, err := e.LocalStore.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := range es {
		if slices.Contains(e.names, es[i].Name) {
			es[i].Version = unknownVersion
		}
	}
	return es, nil
}

func (e *everyRound) Apply(ctx context.Context, docs []meta.Document) error {
	kept := make([]meta.Document, 0, len(docs))
	for _, d := range docs {
		if slices.Contains(e.names, d.Name) {
			cur, err := e.LocalStore.Get(ctx, d.Name)
			if err == nil && cur.Version.Equal(d.Version) && sameBody(cur.Body, d.Body) {
				continue
			}
		}
		kept = append(kept, d)
	}
	return e.LocalStore.Apply(ctx, kept)
}

// sameBody compares two bodies in their canonical form.
func sameBody(a, b []byte) bool {
	_, ca, err1 := DecodeDocument(a)
	_, cb, err2 := DecodeDocument(b)
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}
