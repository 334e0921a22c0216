package storeplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/internal/grpcopt"
	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	sdkstore "github.com/replicatorhq/replicator/sdk/store"
)

// The append side channel: the append stream's messages (AppendBatch host
// -> plugin, one AppendAck per batch plugin -> host, in order) as
// length-framed protobuf on a plain unix socket the host offers through the
// AppendChannel call (sdk/internal/side); the host half-closes to end it.

// appendConn is one append stream as the appender sees it: the gRPC Append
// stream or a side channel.
type appendConn interface {
	Send(*storev1.AppendBatch) error
	Recv() (*storev1.AppendAck, error)
	CloseSend() error
}

// sideStream is the host's end of an append side channel.
type sideStream struct{ f *side.FrameConn }

func (s *sideStream) Send(b *storev1.AppendBatch) error { return s.f.Write(b) }

func (s *sideStream) Recv() (*storev1.AppendAck, error) {
	ack := &storev1.AppendAck{}
	if err := s.f.Read(ack); err != nil {
		s.f.Close()
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: %w", ErrPluginShutdown, err)
	}
	return ack, nil
}

func (s *sideStream) CloseSend() error { return s.f.CloseWrite() }

// openAppend opens an append stream: the side channel when the plugin
// offers it (and the config allows it), else the gRPC Append stream.
func (c *Client) openAppend() (appendConn, error) {
	if !c.cfg.DisableSideChannel && !c.noSide.Load() {
		s, err := c.openSide()
		if err == nil {
			return s, nil
		}
		if errors.Is(c.fail(errors.Unwrap(err)), ErrPluginShutdown) {
			return nil, err // the plugin is gone: no fallback either
		}
		if st, ok := status.FromError(errors.Unwrap(err)); ok && st.Code() == codes.Unimplemented {
			c.log.Debug("the plugin has no append side channel; appends use the gRPC stream")
		} else {
			c.log.Warn("append side channel unavailable; appends use the gRPC stream", "error", err)
		}
		c.noSide.Store(true)
	}
	return c.rpc.Append(c.ctx)
}

func (c *Client) openSide() (appendConn, error) {
	f, err := c.dialSide(func(ctx context.Context, sl *side.Listener) error {
		_, err := c.rpc.AppendChannel(ctx, &storev1.AppendChannelRequest{Socket: sl.Path, Token: sl.Token})
		return err
	})
	if err != nil {
		return nil, err
	}
	return &sideStream{f: f}, nil
}

// dialSide sets up a side channel: it listens, makes the call that asks
// the plugin to dial in (call gets the listener's path and token), and
// returns the accepted connection. A failed call comes back wrapped once
// (errors.Unwrap gives the gRPC error).
func (c *Client) dialSide(call func(context.Context, *side.Listener) error) (*side.FrameConn, error) {
	sl, err := side.Listen()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.CallTimeout)
	defer cancel()
	type accepted struct {
		c   *net.UnixConn
		err error
	}
	got := make(chan accepted, 1)
	go func() {
		uc, err := sl.Accept(ctx)
		got <- accepted{uc, err}
	}()
	rerr := call(ctx, sl)
	if rerr != nil {
		cancel()
	}
	a := <-got
	if rerr != nil {
		if a.c != nil {
			a.c.Close()
		}
		return nil, fmt.Errorf("storeplugin: side channel: %w", rerr)
	}
	if a.err != nil {
		return nil, a.err
	}
	return side.NewFrameConn(a.c, grpcopt.MaxMessageBytes), nil
}

// sideConns tracks the plugin's side channel connections, closed with the
// store.
type sideConns struct {
	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	wg    sync.WaitGroup
}

func (s *sideConns) add(c *net.UnixConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*net.UnixConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
}

func (s *sideConns) done(c *net.UnixConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
	s.wg.Done()
}

// closeAll closes every side channel and waits for their loops.
func (s *sideConns) closeAll() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// dialSide dials the host's side channel for a stream on the open store;
// the caller serves it in a goroutine that ends with s.sides.done(c).
func (s *server) dialSide(ctx context.Context, socket string, token []byte) (sdkstore.Store, *net.UnixConn, error) {
	st, err := s.store()
	if err != nil {
		return nil, nil, err
	}
	c, err := side.Dial(ctx, socket, token)
	if err != nil {
		return nil, nil, status.Error(codes.Unavailable, err.Error())
	}
	s.sides.add(c)
	return st, c, nil
}

// AppendChannel dials the host's side channel and serves an append stream
// on it until the host ends it or the store closes.
func (s *server) AppendChannel(ctx context.Context, req *storev1.AppendChannelRequest) (*storev1.AppendChannelResponse, error) {
	st, c, err := s.dialSide(ctx, req.Socket, req.Token)
	if err != nil {
		return nil, err
	}
	go func() {
		defer s.sides.done(c)
		f := side.NewFrameConn(c, grpcopt.MaxMessageBytes)
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := s.serveAppend(sctx, st, func() (*storev1.AppendBatch, error) {
			b := &storev1.AppendBatch{}
			return b, f.Read(b)
		}, func(a *storev1.AppendAck) error { return f.Write(a) })
		if err != nil && !errors.Is(err, net.ErrClosed) {
			s.logger.Warn("append channel ended", "error", err)
		}
	}()
	return &storev1.AppendChannelResponse{}, nil
}

// ReadChannel dials the host's side channel and sends chunks from req.From
// on it until the max offset (then it half-closes), the host closes it or
// the store closes.
func (s *server) ReadChannel(ctx context.Context, req *storev1.ReadChannelRequest) (*storev1.ReadChannelResponse, error) {
	st, c, err := s.dialSide(ctx, req.Socket, req.Token)
	if err != nil {
		return nil, err
	}
	go func() {
		defer s.sides.done(c)
		f := side.NewFrameConn(c, grpcopt.MaxMessageBytes)
		err := sendChunks(st, req.From, readStreamUnbounded, int(req.ChunkBytes), func(ch *storev1.Chunk) error { return f.Write(ch) })
		if err == nil {
			err = f.CloseWrite()
		}
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			s.logger.Warn("read channel ended", "error", err)
		}
	}()
	return &storev1.ReadChannelResponse{}, nil
}
