package metaplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/internal/pluginkind"
	"github.com/replicatorhq/replicator/sdk/internal/rpcerr"
	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/proto/metav1"
)

// errorTable is THE mapping between the model's sentinels (package meta)
// and gRPC codes.
var errorTable = []rpcerr.ErrorCode{
	{Err: meta.ErrNotFound, Code: codes.NotFound, Reason: "NOT_FOUND"},
	{Err: meta.ErrInvalidName, Code: codes.InvalidArgument, Reason: "INVALID_NAME"},
	{Err: meta.ErrInvalidDocument, Code: codes.InvalidArgument, Reason: "INVALID_DOCUMENT"},
	{Err: meta.ErrTooLarge, Code: codes.ResourceExhausted, Reason: "TOO_LARGE"},
	{Err: meta.ErrClosed, Code: codes.Aborted, Reason: "CLOSED"},
	{Err: plugin.ErrPluginShutdown, Code: codes.Unavailable, Reason: "PLUGIN_SHUTDOWN"},
}

// OpenRequest is what the host asks the plugin to open.
type OpenRequest struct {
	Dir            string            // the documents' directory
	CreateDefaults bool              // create RocketMQ's default documents when absent (master)
	Options        map[string]string // plugin-specific settings
	Logger         hclog.Logger      // the plugin's logger; never nil
}

// Opener opens the plugin's store, once, when the host sends Open.
type Opener func(ctx context.Context, req OpenRequest) (meta.Store, error)

// Serve serves the store that open opens as the metadata plugin name, and
// never returns.
func Serve(name, version string, open Opener) {
	plugin.Serve(plugin.Info{Kind: plugin.KindMetadata, Name: name, Version: version},
		&Plugin{Open: open, Logger: plugin.Logger(name)})
}

// Plugin is the go-plugin plugin of the metadata kind (a
// goplugin.GRPCPlugin with the fields Open and Logger). The plugin side sets
// Open (and Logger; nil = no logs); the host side uses it empty and gets a
// *Conn from Dispense.
type Plugin = pluginkind.Plugin[Opener, service]

// service is the metadata kind's part of Plugin.
type service struct{}

// Register registers the metadata service.
func (service) Register(s *grpc.Server, open Opener, log hclog.Logger) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	metav1.RegisterMetadataServer(s, &server{open: open, log: log})
}

// Conn returns a *Conn.
func (service) Conn(cc *grpc.ClientConn) any { return &Conn{rpc: metav1.NewMetadataClient(cc)} }

// Conn is the host's handle on a metadata plugin not yet opened.
type Conn struct{ rpc metav1.MetadataClient }

// Open opens the plugin's store.
func (c *Conn) Open(ctx context.Context, req OpenRequest) (*Client, error) {
	_, err := c.rpc.Open(ctx, &metav1.OpenRequest{Dir: req.Dir, CreateDefaults: req.CreateDefaults, Options: req.Options})
	if err != nil {
		return nil, fmt.Errorf("metaplugin: open %q: %w", req.Dir, rpcerr.FromStatus(errorTable, err))
	}
	return &Client{rpc: c.rpc}, nil
}

func versionToProto(v meta.DataVersion) *metav1.DataVersion {
	return &metav1.DataVersion{StateVersion: v.StateVersion, Timestamp: v.Timestamp, Counter: v.Counter}
}

func versionFromProto(p *metav1.DataVersion) meta.DataVersion {
	if p == nil {
		return meta.DataVersion{}
	}
	return meta.DataVersion{StateVersion: p.StateVersion, Timestamp: p.Timestamp, Counter: p.Counter}
}

func docToProto(d meta.Document) *metav1.Document {
	return &metav1.Document{Name: d.Name, Version: versionToProto(d.Version), Body: d.Body}
}

func docFromProto(p *metav1.Document) meta.Document {
	return meta.Document{Name: p.Name, Version: versionFromProto(p.Version), Body: p.Body}
}

// Client is an external metadata plugin seen as a meta.Store.
type Client struct{ rpc metav1.MetadataClient }

var _ meta.Store = (*Client)(nil)

// callTimeout bounds a call whose ctx has no deadline.
const callTimeout = 30 * time.Second

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, callTimeout)
}

func fail(op string, err error) error {
	return fmt.Errorf("metaplugin: %s: %w", op, rpcerr.FromStatus(errorTable, err))
}

// List lists the documents.
func (c *Client) List(ctx context.Context) ([]meta.Entry, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	r, err := c.rpc.List(ctx, &metav1.ListRequest{})
	if err != nil {
		return nil, fail("list", err)
	}
	out := make([]meta.Entry, len(r.Entries))
	for i, e := range r.Entries {
		out[i] = meta.Entry{Name: e.Name, Version: versionFromProto(e.Version)}
	}
	return out, nil
}

// Get returns one document.
func (c *Client) Get(ctx context.Context, name string) (meta.Document, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	r, err := c.rpc.Get(ctx, &metav1.GetRequest{Name: name})
	if err != nil {
		return meta.Document{}, fail("get "+name, err)
	}
	return docFromProto(r), nil
}

// Put stores a document and bumps its version.
func (c *Client) Put(ctx context.Context, name string, body json.RawMessage) (meta.Document, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	r, err := c.rpc.Put(ctx, &metav1.PutRequest{Name: name, Body: body})
	if err != nil {
		return meta.Document{}, fail("put "+name, err)
	}
	return docFromProto(r), nil
}

// Apply stores documents with their versions, all or nothing.
func (c *Client) Apply(ctx context.Context, docs []meta.Document) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req := &metav1.ApplyRequest{Docs: make([]*metav1.Document, len(docs))}
	for i, d := range docs {
		req.Docs[i] = docToProto(d)
	}
	if _, err := c.rpc.Apply(ctx, req); err != nil {
		return fail("apply", err)
	}
	return nil
}

// Close closes the plugin's store.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := c.rpc.Close(ctx, &metav1.CloseRequest{}); err != nil {
		return fail("close", err)
	}
	return nil
}

// server adapts gRPC calls onto the plugin's meta.Store.
type server struct {
	metav1.UnimplementedMetadataServer
	open Opener
	log  hclog.Logger

	mu     sync.Mutex // guards st and closed
	st     meta.Store
	closed bool
}

func (s *server) store() (meta.Store, error) {
	s.lock()
	defer s.unlock()
	if s.closed {
		return nil, rpcerr.ToStatus(errorTable, meta.ErrClosed)
	}
	if s.st == nil {
		return nil, status.Error(codes.Internal, "metaplugin: store is not open (Open must come first)")
	}
	return s.st, nil
}

func (s *server) lock()   { s.mu.Lock() }
func (s *server) unlock() { s.mu.Unlock() }

func (s *server) Open(ctx context.Context, req *metav1.OpenRequest) (*metav1.OpenResponse, error) {
	s.lock()
	defer s.unlock()
	if s.st != nil || s.closed {
		return nil, status.Error(codes.AlreadyExists, "metaplugin: store already opened")
	}
	if s.open == nil {
		return nil, status.Error(codes.Internal, "metaplugin: plugin has no Opener")
	}
	st, err := s.open(ctx, OpenRequest{Dir: req.Dir, CreateDefaults: req.CreateDefaults, Options: req.Options, Logger: s.log})
	if err != nil {
		return nil, rpcerr.ToStatus(errorTable, err)
	}
	s.st = st
	return &metav1.OpenResponse{}, nil
}

func (s *server) List(ctx context.Context, _ *metav1.ListRequest) (*metav1.ListResponse, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	es, err := st.List(ctx)
	if err != nil {
		return nil, rpcerr.ToStatus(errorTable, err)
	}
	out := &metav1.ListResponse{Entries: make([]*metav1.Entry, len(es))}
	for i, e := range es {
		out.Entries[i] = &metav1.Entry{Name: e.Name, Version: versionToProto(e.Version)}
	}
	return out, nil
}

func (s *server) Get(ctx context.Context, req *metav1.GetRequest) (*metav1.Document, error) {
	return s.document(func(st meta.Store) (meta.Document, error) { return st.Get(ctx, req.Name) })
}

func (s *server) Put(ctx context.Context, req *metav1.PutRequest) (*metav1.Document, error) {
	return s.document(func(st meta.Store) (meta.Document, error) { return st.Put(ctx, req.Name, req.Body) })
}

// document answers Get and Put: the document op returns from the open store.
func (s *server) document(op func(meta.Store) (meta.Document, error)) (*metav1.Document, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	d, err := op(st)
	if err != nil {
		return nil, rpcerr.ToStatus(errorTable, err)
	}
	return docToProto(d), nil
}

func (s *server) Apply(ctx context.Context, req *metav1.ApplyRequest) (*metav1.ApplyResponse, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	docs := make([]meta.Document, len(req.Docs))
	for i, d := range req.Docs {
		docs[i] = docFromProto(d)
	}
	if err := st.Apply(ctx, docs); err != nil {
		return nil, rpcerr.ToStatus(errorTable, err)
	}
	return &metav1.ApplyResponse{}, nil
}

func (s *server) Close(context.Context, *metav1.CloseRequest) (*metav1.CloseResponse, error) {
	s.lock()
	st, already := s.st, s.closed
	s.closed = true
	s.unlock()
	if already {
		return nil, rpcerr.ToStatus(errorTable, meta.ErrClosed)
	}
	if st != nil {
		if err := st.Close(); err != nil {
			return nil, rpcerr.ToStatus(errorTable, err)
		}
	}
	return &metav1.CloseResponse{}, nil
}
