package storeplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

	mu     sync.Mutex // guards st, closed and orders bounds snapshots with seq
	st     store.Store
	closed bool
	seq    uint64

	files inPlaceFiles // for InPlace ops; used by the Append stream only
	sides sideConns    // append side channels
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
	if s.st != nil || s.closed {
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
	s.st = st
	_, shares := st.(SegmentFiles)
	_, noWrites := st.(NoHostWrites)
	s.seq++
	return &storev1.OpenResponse{Bounds: boundsToProto(st.Bounds(), s.seq), SharesFiles: shares, NoHostWrites: noWrites}, nil
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
	s.files.close()
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

func (s *server) SegmentFile(_ context.Context, req *storev1.SegmentFileRequest) (*storev1.SegmentFileResponse, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	sf, ok := st.(SegmentFiles)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "storeplugin: store does not share its files")
	}
	path, ok := sf.SegmentFile(req.Base)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "storeplugin: no segment file at base %d", req.Base)
	}
	return &storev1.SegmentFileResponse{Path: path}, nil
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
	s.files.close()
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
	return s.serveAppend(stream.Context(), st, stream.Recv, func(a *storev1.AppendAck) error { return stream.Send(a) })
}

// serveAppend is the plugin's end of one append stream (gRPC or side
// channel): it applies each batch in order and answers it with one ack.
// It returns nil when the host ends the stream.
func (s *server) serveAppend(ctx context.Context, st store.Store, recv func() (*storev1.AppendBatch, error), send func(*storev1.AppendAck) error) error {
	for {
		b, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ack := &storev1.AppendAck{Seq: b.Seq, Results: make([]*storev1.OpResult, len(b.Ops))}
		for i, op := range b.Ops {
			r := &storev1.OpResult{}
			switch o := op.Op.(type) {
			case *storev1.AppendOp_Message:
				m := messageFromProto(o.Message)
				res, err := st.Append(ctx, &m)
				r.Result, r.Error = resultToProto(res), encodeError(err)
			case *storev1.AppendOp_Raw:
				max, err := st.AppendAt(o.Raw.Offset, o.Raw.Data)
				r.MaxOffset, r.Error = max, encodeError(err)
			case *storev1.AppendOp_InPlace:
				max, err := s.files.appendInPlace(st, o.InPlace.Offset, o.InPlace.Length)
				r.MaxOffset, r.Error = max, encodeError(err)
			default:
				r.Error = &storev1.Error{Code: int32(codes.InvalidArgument), Message: "storeplugin: empty append op"}
			}
			ack.Results[i] = r
		}
		ack.Bounds = s.bounds(st)
		if err := send(ack); err != nil {
			return err
		}
	}
}

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
	chunk := int(req.ChunkBytes)
	if chunk <= 0 {
		chunk = defaultChunkBytes
	}
	chunk = min(chunk, maxChunkBytes)
	off, left := req.From, req.MaxBytes
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
		err = stream.Send(&storev1.Chunk{Offset: off, Data: v.Data}) // Send encodes before returning
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
	st, err := s.store()
	if err != nil {
		return err
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
		closed := s.closed
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

// inPlaceFiles reads the bytes of InPlace ops back from the shared segment
// files (read-only descriptors, cached per segment).
type inPlaceFiles struct {
	mu    sync.Mutex
	files map[int64]*os.File
	buf   []byte
}

// maxInPlace bounds one InPlace op (a frame is at most 4 MiB).
const maxInPlace = 64 << 20

func (f *inPlaceFiles) appendInPlace(st store.Store, offset, length int64) (int64, error) {
	sf, ok := st.(SegmentFiles)
	if _, no := st.(NoHostWrites); !ok || no {
		return 0, fmt.Errorf("storeplugin: in-place append at %d: the store does not take host writes into its files: %w", offset, store.ErrCorrupt)
	}
	if length < 0 || length > maxInPlace {
		return 0, fmt.Errorf("storeplugin: in-place append of %d bytes: %w", length, store.ErrSegmentOverflow)
	}
	b := st.Bounds()
	base := segmentBase(offset, b)
	f.mu.Lock()
	defer f.mu.Unlock()
	file := f.files[base]
	if file == nil {
		path, ok := sf.SegmentFile(base)
		if !ok {
			return b.Max, fmt.Errorf("storeplugin: in-place append at %d: no segment file at %d: %w", offset, base, store.ErrOffsetMismatch)
		}
		var err error
		if file, err = os.Open(path); err != nil {
			return b.Max, fmt.Errorf("storeplugin: in-place append at %d: %w", offset, err)
		}
		if f.files == nil {
			f.files = map[int64]*os.File{}
		}
		f.files[base] = file
	}
	if int64(cap(f.buf)) < length {
		f.buf = make([]byte, length)
	}
	buf := f.buf[:length]
	if _, err := file.ReadAt(buf, offset-base); err != nil {
		return b.Max, fmt.Errorf("storeplugin: in-place append at %d: %w", offset, err)
	}
	return st.AppendAt(offset, buf)
}

func (f *inPlaceFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b, file := range f.files {
		file.Close()
		delete(f.files, b)
	}
}
