package storeplugin

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// flushedPoll is how often a Watch stream looks for a change of the flushed
// offset, which the Store interface does not signal.
const flushedPoll = 50 * time.Millisecond

// watchMinInterval spaces a Watch stream's pushes: changes within it are
// coalesced into one push. The host learns the max offset of its own
// appends from their acks, so the stream only has to carry what changes
// on the plugin's own (flushed offset, retention); one push per append
// would put a gRPC message per message back on the data path.
const watchMinInterval = 10 * time.Millisecond

// server adapts gRPC calls onto the plugin's Store.
type server struct {
	storev1.UnimplementedStoreServer
	open   Opener
	logger hclog.Logger

	mu     sync.Mutex // guards st, closed, gen and orders bounds snapshots with seq
	st     store.Store
	closed bool
	gen    uint64 // bumped by every Open: a Watch of an earlier store ends
	seq    uint64

	sides sideConns // append side channels
}

func newServer(open Opener, logger hclog.Logger) *server {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &server{open: open, logger: logger}
}

var errNotOpen = status.Error(codes.Internal, "storeplugin: store is not open (Open must come first)")

func (s *server) store() (store.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, toStatus(store.ErrClosed)
	}
	if s.st == nil {
		return nil, errNotOpen
	}
	return s.st, nil
}

// bounds takes a snapshot stamped with the next sequence number; the lock
// makes the seq order the snapshot order.
func (s *server) bounds(st store.Store) *storev1.Bounds {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return boundsToProto(st.Bounds(), s.seq)
}

func (s *server) Open(ctx context.Context, req *storev1.OpenRequest) (*storev1.OpenResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil && !s.closed {
		return nil, status.Error(codes.AlreadyExists, "storeplugin: store already opened")
	}
	if s.open == nil {
		return nil, status.Error(codes.Internal, "storeplugin: plugin has no Opener")
	}
	st, err := s.open(ctx, OpenRequest{
		Dir:         req.Dir,
		SegmentSize: req.SegmentSize,
		Options:     req.Options,
		Logger:      s.logger,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	s.st, s.closed = st, false
	s.gen++
	s.seq++
	return &storev1.OpenResponse{Bounds: boundsToProto(st.Bounds(), s.seq)}, nil
}

func (s *server) GetBounds(context.Context, *storev1.BoundsRequest) (*storev1.Bounds, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	return s.bounds(st), nil
}

func (s *server) Truncate(_ context.Context, req *storev1.TruncateRequest) (*storev1.Bounds, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	if err := st.Truncate(req.Offset); err != nil {
		return nil, toStatus(err)
	}
	return s.bounds(st), nil
}

func (s *server) Flush(context.Context, *storev1.FlushRequest) (*storev1.Bounds, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	f, ok := st.(Flusher)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "storeplugin: store cannot flush on demand")
	}
	if err := f.Flush(); err != nil {
		return nil, toStatus(err)
	}
	return s.bounds(st), nil
}

// maxReadMessages bounds one ReadMessages answer.
const maxReadMessages = 4096

func (s *server) ReadMessages(_ context.Context, req *storev1.ReadMessagesRequest) (*storev1.ReadMessagesResponse, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	n := int(min(req.N, maxReadMessages))
	recs, next, err := st.ReadMessages(req.Offset, n)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &storev1.ReadMessagesResponse{Next: next, Records: make([]*storev1.Record, len(recs))}
	for i := range recs {
		out.Records[i] = recordToProto(&recs[i])
	}
	return out, nil
}

func (s *server) Close(context.Context, *storev1.CloseRequest) (*storev1.CloseResponse, error) {
	s.mu.Lock()
	st := s.st
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return nil, toStatus(store.ErrClosed)
	}
	s.sides.closeAll()
	if st == nil {
		return &storev1.CloseResponse{}, nil
	}
	if err := st.Close(); err != nil {
		return nil, toStatus(err)
	}
	return &storev1.CloseResponse{}, nil
}

// Append applies each batch in order and answers it with one ack.
func (s *server) Append(stream storev1.Store_AppendServer) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	recv := func() (*storev1.AppendBatch, [][]byte, error) {
		b, err := stream.Recv()
		return b, nil, err
	}
	return s.serveAppend(stream.Context(), st, recv, grpcAcks{stream})
}

// ackSink is where serveAppend puts its acks: the gRPC stream sends each
// at once; a side channel may hold them while the next batch is already
// arriving and send them together (sideAcks).
type ackSink interface {
	// put sends ack or queues it; records (per result, the record
	// stored) stay valid until the next flush returns.
	put(ack *storev1.AppendAck, records [][]byte) error
	// flush sends what put queued. hold reports whether put may queue
	// another ack first.
	flush() error
	hold() bool
}

// maxHeldAcks bounds the acks a side channel holds back while batches keep
// arriving (sideAcks).
const maxHeldAcks = 16

// serveAppend is the plugin's end of one append stream (gRPC or side
// channel): it applies each batch in order and answers it with one ack.
// recv returns a batch and its ops' payloads (nil: they are in the ops'
// fields); acks.put gets the ack and, per result, the record stored
// (empty when none). When the batch asks (want_records), each stored
// Append's bytes go back, read through Store.Read and released once the
// ack is sent (views stay out while later ops and held batches append, as
// within a batch). An ack is put only after every op of its batch returned,
// so an acknowledged Append or AppendAt is in the store whenever the host
// learns of it; while the next batch has already begun to arrive
// (acks.hold) up to maxHeldAcks acks wait and go out with one write. It
// returns nil when the host ends the stream.
func (s *server) serveAppend(ctx context.Context, st store.Store, recv func() (*storev1.AppendBatch, [][]byte, error), acks ackSink) error {
	var views []store.View
	var records [][]byte
	held := 0 // acks put and not flushed
	release := func() {
		for i := range views {
			views[i].Release()
		}
		clear(views)
		views = views[:0]
	}
	defer release()
	for {
		b, parts, err := recv()
		if errors.Is(err, io.EOF) {
			return acks.flush()
		}
		if err != nil {
			return err
		}
		ack := &storev1.AppendAck{Seq: b.Seq, Results: make([]*storev1.OpResult, len(b.Ops))}
		records = append(records[:0], make([][]byte, len(b.Ops))...)
		for i, op := range b.Ops {
			r := &storev1.OpResult{}
			data := payload(op, parts, i)
			switch o := op.Op.(type) {
			case *storev1.AppendOp_Message:
				m := messageFromProto(o.Message)
				m.Body = data
				res, err := st.Append(ctx, &m)
				r.Result, r.Error = resultToProto(res), encodeError(err)
				if b.WantRecords && res.Size > 0 && (err == nil || errors.Is(err, store.ErrFlushDiskTimeout)) {
					if v, ok := readRecord(st, res); ok {
						records[i] = v.Data
						views = append(views, v)
					}
				}
			case *storev1.AppendOp_Raw:
				max, err := st.AppendAt(o.Raw.Offset, data)
				r.MaxOffset, r.Error = max, encodeError(err)
			default:
				r.Error = &storev1.Error{Code: int32(codes.InvalidArgument), Message: "storeplugin: empty append op"}
			}
			ack.Results[i] = r
		}
		ack.Bounds = s.bounds(st)
		err = acks.put(ack, records)
		clear(records)
		held++
		if err == nil && (held >= maxHeldAcks || !acks.hold()) {
			err = acks.flush()
			release()
			held = 0
		}
		if err != nil {
			return err
		}
	}
}

// grpcAcks sends each ack on the gRPC Append stream at once.
type grpcAcks struct{ s storev1.Store_AppendServer }

func (g grpcAcks) put(a *storev1.AppendAck, records [][]byte) error {
	for i, r := range a.Results {
		r.Record = records[i]
	}
	return g.s.Send(a)
}

func (grpcAcks) flush() error { return nil }
func (grpcAcks) hold() bool   { return false }

// Default and largest chunk of a ReadStream.
const (
	defaultChunkBytes = 256 << 10
	maxChunkBytes     = 4 << 20
)

// ReadStream sends chunks from req.From until req.MaxBytes or the max offset.
func (s *server) ReadStream(req *storev1.ReadStreamRequest, stream storev1.Store_ReadStreamServer) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	return sendChunks(st, req.From, req.MaxBytes, int(req.ChunkBytes), func(off int64, data []byte) error {
		return stream.Send(&storev1.Chunk{Offset: off, Data: data})
	})
}

// sendChunks sends the stored bytes from off, in chunks of at most chunk
// bytes, until left bytes or the max offset. send writes the chunk's bytes
// at off before it returns (the view is released after it).
func sendChunks(st store.Log, off, left int64, chunk int, send func(off int64, data []byte) error) error {
	if chunk <= 0 {
		chunk = defaultChunkBytes
	}
	chunk = min(chunk, maxChunkBytes)
	if left <= 0 {
		left = int64(chunk)
	}
	for left > 0 {
		v, err := st.Read(off, int(min(int64(chunk), left)))
		if err != nil {
			return toStatus(err)
		}
		n := len(v.Data)
		if n == 0 {
			v.Release()
			return nil
		}
		err = send(off, v.Data)
		v.Release()
		if err != nil {
			return err
		}
		off += int64(n)
		left -= int64(n)
	}
	return nil
}

// Watch pushes the bounds whenever they change.
func (s *server) Watch(_ *storev1.WatchRequest, stream storev1.Store_WatchServer) error {
	s.mu.Lock()
	st, gen, closed := s.st, s.gen, s.closed
	s.mu.Unlock()
	if closed {
		return toStatus(store.ErrClosed)
	}
	if st == nil {
		return errNotOpen
	}
	ch := make(chan struct{}, 1)
	cancel := st.Watch(ch)
	defer cancel()
	t := time.NewTicker(flushedPoll)
	defer t.Stop()
	var last store.Bounds
	first := true
	for {
		b := s.bounds(st)
		if cur := boundsFromProto(b); first || cur != last {
			first, last = false, cur
			if err := stream.Send(b); err != nil {
				return err
			}
			select {
			case <-stream.Context().Done():
				return nil
			case <-time.After(watchMinInterval):
			}
		}
		s.mu.Lock()
		closed := s.closed || s.gen != gen
		s.mu.Unlock()
		if closed {
			return toStatus(store.ErrClosed)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ch:
		case <-t.C:
		}
	}
}

// readRecord reads back the bytes an Append stored (one record never spans
// two segments, so one Read covers it). ok=false when the store gives less.
func readRecord(st store.Log, res store.AppendResult) (store.View, bool) {
	v, err := st.Read(res.Offset, int(res.Size))
	if err != nil {
		return store.View{}, false
	}
	if len(v.Data) != int(res.Size) {
		v.Release()
		return store.View{}, false
	}
	return v, true
}
