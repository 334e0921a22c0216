package storeplugin

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
)

// The append side channel: the append stream's messages (AppendBatch,
// AppendAck) on a plain unix socket the host offers through the
// AppendChannel call (sdk/plugin's side channels: a private socket and a
// token). Each message is one frame:
//
//	 0                4                       4+len
//	+----------------+-----------------------+
//	| len  u32 (BE)  | protobuf message      |
//	+----------------+-----------------------+
//
// len is at most plugin.MaxMessageBytes, checked before allocating. The
// channel carries one append stream: batches host -> plugin, one ack per
// batch plugin -> host, in order; the host half-closes to end it.

// frameHeader is the length prefix of a side channel frame.
const frameHeader = 4

// errFrameTooLarge: a frame's length is above plugin.MaxMessageBytes.
var errFrameTooLarge = errors.New("storeplugin: append channel frame too large")

// frameConn reads and writes frames on one side channel connection. One
// goroutine writes, one reads.
type frameConn struct {
	c    *net.UnixConn
	r    *bufio.Reader
	wbuf []byte
	rbuf []byte
}

func newFrameConn(c *net.UnixConn) *frameConn {
	return &frameConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// readFrom returns a frameConn that only reads, from r (fuzzing).
func readFrom(r io.Reader) *frameConn { return &frameConn{r: bufio.NewReader(r)} }

// write sends m as one frame with one write.
func (f *frameConn) write(m proto.Message) error {
	buf := append(f.wbuf[:0], 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return fmt.Errorf("storeplugin: append channel: %w", err)
	}
	n := len(buf) - frameHeader
	if n > plugin.MaxMessageBytes {
		return fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
	}
	binary.BigEndian.PutUint32(buf, uint32(n))
	f.wbuf = buf
	if _, err := f.c.Write(buf); err != nil {
		return fmt.Errorf("storeplugin: append channel: %w", err)
	}
	return nil
}

// read receives one frame into m. io.EOF means the peer ended the stream
// cleanly on a frame boundary.
func (f *frameConn) read(m proto.Message) error {
	var h [frameHeader]byte
	if _, err := io.ReadFull(f.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return fmt.Errorf("storeplugin: append channel: %w", err)
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > plugin.MaxMessageBytes {
		return fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
	}
	if cap(f.rbuf) < int(n) {
		f.rbuf = make([]byte, n)
	}
	b := f.rbuf[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return fmt.Errorf("storeplugin: append channel: %w", io.ErrUnexpectedEOF)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("storeplugin: append channel: %w", err)
	}
	return nil
}

// appendConn is one append stream as the appender sees it: the gRPC Append
// stream or a side channel.
type appendConn interface {
	Send(*storev1.AppendBatch) error
	Recv() (*storev1.AppendAck, error)
	CloseSend() error
}

// sideStream is the host's end of an append side channel.
type sideStream struct {
	f *frameConn
}

func (s *sideStream) Send(b *storev1.AppendBatch) error { return s.f.write(b) }

func (s *sideStream) Recv() (*storev1.AppendAck, error) {
	ack := &storev1.AppendAck{}
	if err := s.f.read(ack); err != nil {
		if errors.Is(err, io.EOF) {
			s.f.c.Close()
			return nil, io.EOF
		}
		s.f.c.Close()
		return nil, fmt.Errorf("%w: %v", ErrPluginShutdown, err)
	}
	return ack, nil
}

func (s *sideStream) CloseSend() error { return s.f.c.CloseWrite() }

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
	side, err := plugin.ListenSide()
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
		uc, err := side.Accept(ctx)
		got <- accepted{uc, err}
	}()
	_, rerr := c.rpc.AppendChannel(ctx, &storev1.AppendChannelRequest{Socket: side.Path, Token: side.Token})
	if rerr != nil {
		cancel()
	}
	a := <-got
	if rerr != nil {
		if a.c != nil {
			a.c.Close()
		}
		return nil, fmt.Errorf("storeplugin: append channel: %w", rerr)
	}
	if a.err != nil {
		return nil, a.err
	}
	return &sideStream{f: newFrameConn(a.c)}, nil
}

// sideConns tracks the plugin's side channel connections, closed with the
// store.
type sideConns struct {
	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	wg    sync.WaitGroup
}

func (s *sideConns) add(c *net.UnixConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*net.UnixConn]struct{}{}
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
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

// AppendChannel dials the host's side channel and serves an append stream
// on it until the host ends it or the store closes.
func (s *server) AppendChannel(ctx context.Context, req *storev1.AppendChannelRequest) (*storev1.AppendChannelResponse, error) {
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	c, err := plugin.DialSide(ctx, req.Socket, req.Token)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	s.sides.add(c)
	go func() {
		defer s.sides.done(c)
		f := newFrameConn(c)
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := s.serveAppend(sctx, st, func() (*storev1.AppendBatch, error) {
			b := &storev1.AppendBatch{}
			return b, f.read(b)
		}, func(a *storev1.AppendAck) error { return f.write(a) })
		if err != nil && !errors.Is(err, net.ErrClosed) {
			s.logger.Warn("append channel ended", "error", err)
		}
	}()
	return &storev1.AppendChannelResponse{}, nil
}
