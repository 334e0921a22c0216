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
	"github.com/replicatorhq/replicator/sdk/internal/shmring"
	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	sdkstore "github.com/replicatorhq/replicator/sdk/store"
)

// The append side channel: the append stream's messages (AppendBatch host
// -> plugin, one AppendAck per batch plugin -> host, in order) in side
// channel frames (sdk/internal/side) on a plain unix socket the host offers
// through the AppendChannel call; the host half-closes to end it. The
// payloads travel as the frames' raw parts, outside the messages: op i's
// body or bytes is part i of its batch's frame, the record stored by op i
// is part i of the ack's frame, a chunk's bytes are the one part of its
// frame. The message fields they would fill (Message.body, RawAppend.data,
// OpResult.record, Chunk.data) are empty on a side channel.

// appendConn is one append stream as the appender sees it: the gRPC Append
// stream or a side channel. parts[i] is the payload of op i (Send) or the
// record stored by op i (Recv), as above.
type appendConn interface {
	Send(b *storev1.AppendBatch, parts [][]byte) error
	Recv() (ack *storev1.AppendAck, records [][]byte, err error)
	CloseSend() error
}

// sideStream is the host's end of an append side channel.
type sideStream struct {
	f    *side.FrameConn
	ack  storev1.AppendAck // reused: the appender is done with an ack before the next Recv
	ring *shmring.Ring     // the append ring (ring.go); nil: none
	wmu  sync.Mutex        // one writer: batches and doorbells
}

func (s *sideStream) Send(b *storev1.AppendBatch, parts [][]byte) error {
	return s.write(b, parts)
}

func (s *sideStream) write(b *storev1.AppendBatch, parts [][]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.f.WriteParts(b, parts)
}

// Recv returns the next ack; it and its records are valid until the next
// Recv.
func (s *sideStream) Recv() (*storev1.AppendAck, [][]byte, error) {
	s.ack.Reset()
	records, err := s.f.ReadShared(&s.ack)
	if err != nil {
		s.f.Close()
		if errors.Is(err, io.EOF) {
			return nil, nil, io.EOF
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrPluginShutdown, err)
	}
	if len(records) != len(s.ack.Results) {
		s.f.Close()
		return nil, nil, fmt.Errorf("%w: ack %d: %d records for %d results: %w", ErrPluginShutdown, s.ack.Seq, len(records), len(s.ack.Results), side.ErrBadFrame)
	}
	return &s.ack, records, nil
}

func (s *sideStream) CloseSend() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.f.CloseWrite()
}

// grpcStream is the gRPC Append stream as an appendConn: the payloads go
// back into the messages' fields.
type grpcStream struct{ s storev1.Store_AppendClient }

func (g grpcStream) Send(b *storev1.AppendBatch, parts [][]byte) error {
	for i, op := range b.Ops {
		setPayload(op, parts[i])
	}
	return g.s.Send(b)
}

func (g grpcStream) Recv() (*storev1.AppendAck, [][]byte, error) {
	ack, err := g.s.Recv()
	if err != nil {
		return nil, nil, err
	}
	records := make([][]byte, len(ack.Results))
	for i, r := range ack.Results {
		records[i] = r.Record
	}
	return ack, records, nil
}

func (g grpcStream) CloseSend() error { return g.s.CloseSend() }

// setPayload puts an op's payload in its message field (the gRPC stream).
// Only the sender touches an op's payload fields.
func setPayload(op *storev1.AppendOp, data []byte) {
	switch o := op.Op.(type) {
	case *storev1.AppendOp_Message:
		o.Message.Body = data
	case *storev1.AppendOp_Raw:
		o.Raw.Data = data
	}
}

// payload returns an op's payload: parts[i] on a side channel (parts not
// nil), else the op's message field.
func payload(op *storev1.AppendOp, parts [][]byte, i int) []byte {
	if parts != nil {
		return parts[i]
	}
	switch o := op.Op.(type) {
	case *storev1.AppendOp_Message:
		return o.Message.Body
	case *storev1.AppendOp_Raw:
		return o.Raw.Data
	}
	return nil
}

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
		if olderSDK(err) {
			c.log.Debug("the plugin has no append side channel of this SDK; appends use the gRPC stream", "error", err)
		} else {
			c.log.Warn("append side channel unavailable; appends use the gRPC stream", "error", err)
		}
		c.noSide.Store(true)
	}
	s, err := c.rpc.Append(c.ctx)
	if err != nil {
		return nil, err
	}
	return grpcStream{s}, nil
}

// openSide opens an append side channel, with the append ring (ring.go)
// where the platform has it and the config allows it; a plugin that
// refuses the ring (an older SDK, another platform) gets a channel without.
func (c *Client) openSide() (appendConn, error) {
	if c.cfg.RingBytes > 0 && shmring.Supported && !c.noRing.Load() {
		s, err := c.openSideVersion(true)
		if err == nil || !olderSDK(err) || errors.Is(c.fail(errors.Unwrap(err)), ErrPluginShutdown) {
			return s, err
		}
		c.log.Debug("the plugin takes no append ring; queued appends go on the side channel", "error", err)
		c.noRing.Store(true)
	}
	return c.openSideVersion(false)
}

func (c *Client) openSideVersion(ring bool) (appendConn, error) {
	v := uint32(side.FrameVersion)
	if ring {
		v |= ringVersionBit
	}
	uc, err := c.dialSideConn(func(ctx context.Context, sl *side.Listener) error {
		resp, err := c.rpc.AppendChannel(ctx, &storev1.AppendChannelRequest{Socket: sl.Path, Token: sl.Token, FrameVersion: v})
		if err != nil {
			return err
		}
		return checkFrameVersion(resp.FrameVersion, v)
	})
	if err != nil {
		return nil, err
	}
	s := &sideStream{}
	if ring {
		if s.ring, err = c.sendRingSetup(uc, c.cfg.RingBytes); err != nil {
			uc.Close()
			return nil, err
		}
	}
	s.f = side.NewFrameConn(uc, grpcopt.MaxMessageBytes)
	return s, nil
}

// checkFrameVersion refuses a side channel whose plugin answered with
// another frame layout than want (a plugin built with an older SDK
// answers 0).
func checkFrameVersion(v, want uint32) error {
	if v != want {
		return status.Errorf(codes.FailedPrecondition, "storeplugin: the plugin frames side channels as version %#x, the host as %#x", v, want)
	}
	return nil
}

// olderSDK reports whether a side channel call failed because the plugin
// was built with an SDK that has no such channel or frames it otherwise:
// the host then uses the gRPC stream, as designed.
func olderSDK(err error) bool {
	st, ok := status.FromError(errors.Unwrap(err))
	return ok && (st.Code() == codes.Unimplemented || st.Code() == codes.FailedPrecondition)
}

// dialSide sets up a side channel: it listens, makes the call that asks
// the plugin to dial in (call gets the listener's path and token), and
// returns the accepted connection, framed. A failed call comes back
// wrapped once (errors.Unwrap gives the gRPC error).
func (c *Client) dialSide(call func(context.Context, *side.Listener) error) (*side.FrameConn, error) {
	uc, err := c.dialSideConn(call)
	if err != nil {
		return nil, err
	}
	return side.NewFrameConn(uc, grpcopt.MaxMessageBytes), nil
}

// dialSideConn is dialSide without the framing.
func (c *Client) dialSideConn(call func(context.Context, *side.Listener) error) (*net.UnixConn, error) {
	sl, err := side.Listen()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.CallTimeout)
	defer cancel()
	uc, rerr, aerr := sl.AcceptDuring(ctx, func(ctx context.Context) error { return call(ctx, sl) })
	if rerr != nil {
		return nil, fmt.Errorf("storeplugin: side channel: %w", rerr)
	}
	return uc, aerr
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

// dialSide refuses a host that frames side channels as another version
// (frameVersionOK), then dials the host's side channel for a stream on the
// open store; the caller serves it in a goroutine that ends with
// s.sides.done(c).
func (s *server) dialSide(ctx context.Context, version uint32, ring bool, socket string, token []byte) (sdkstore.Store, *net.UnixConn, error) {
	if err := frameVersionOK(version, ring); err != nil {
		return nil, nil, err
	}
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

// frameVersionOK refuses, before dialing, a host that frames side channels
// otherwise (a host built with an older SDK sends 0): it then uses the
// gRPC stream. ring allows ringVersionBit (the append channel, where the
// platform has the ring): a host refused it asks again without.
func frameVersionOK(v uint32, ring bool) error {
	if v != side.FrameVersion && (!ring || !shmring.Supported || v != side.FrameVersion|ringVersionBit) {
		return status.Errorf(codes.FailedPrecondition, "storeplugin: the host frames side channels as version %#x, this plugin as %#x", v, side.FrameVersion)
	}
	return nil
}

// AppendChannel dials the host's side channel and serves an append stream
// on it until the host ends it or the store closes; with ringVersionBit,
// the setup message and the append ring first (ring.go).
func (s *server) AppendChannel(ctx context.Context, req *storev1.AppendChannelRequest) (*storev1.AppendChannelResponse, error) {
	st, c, err := s.dialSide(ctx, req.FrameVersion, true, req.Socket, req.Token)
	if err != nil {
		return nil, err
	}
	go func() {
		defer s.sides.done(c)
		var rc *ringConsumer
		if req.FrameVersion&ringVersionBit != 0 {
			r, err := recvRingSetup(c)
			if err != nil {
				s.logger.Warn("append channel refused", "error", err)
				return
			}
			if r != nil {
				defer r.Close()
				rc = &ringConsumer{r: r, st: st}
			}
		}
		f := side.NewFrameConn(c, grpcopt.MaxMessageBytes)
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var b storev1.AppendBatch // reused: serveAppend is done with a batch before the next recv
		recv := func() (*storev1.AppendBatch, [][]byte, error) {
			b.Reset()
			parts, err := f.ReadShared(&b)
			if err == nil && len(parts) != len(b.Ops) {
				err = fmt.Errorf("batch %d: %d parts for %d ops: %w", b.Seq, len(parts), len(b.Ops), side.ErrBadFrame)
			}
			return &b, parts, err
		}
		if rc != nil {
			read := recv
			rc.notify = func() error { return f.WriteParts(ringNotify, nil) }
			recv = func() (*storev1.AppendBatch, [][]byte, error) { return rc.recv(read) }
		}
		err := s.serveAppend(sctx, st, recv, sideAcks{f})
		if err != nil && !errors.Is(err, net.ErrClosed) {
			s.logger.Warn("append channel ended", "error", err)
		}
	}()
	return &storev1.AppendChannelResponse{FrameVersion: req.FrameVersion}, nil
}

// sideAcks puts acks on an append side channel: queued while the next
// batch has begun to arrive (its rest follows at once: the host never
// waits for an ack inside a frame), then written together, so a plugin
// that is handed batches faster than one at a time wakes the host once per
// group of acks instead of once per batch.
type sideAcks struct{ f *side.FrameConn }

func (a sideAcks) put(ack *storev1.AppendAck, records [][]byte) error {
	return a.f.QueueParts(ack, records)
}
func (a sideAcks) flush() error { return a.f.Flush() }
func (a sideAcks) hold() bool   { return a.f.Buffered() }

// ReadChannel dials the host's side channel and sends chunks from req.From
// on it until the max offset (then it half-closes), the host closes it or
// the store closes.
func (s *server) ReadChannel(ctx context.Context, req *storev1.ReadChannelRequest) (*storev1.ReadChannelResponse, error) {
	st, c, err := s.dialSide(ctx, req.FrameVersion, false, req.Socket, req.Token)
	if err != nil {
		return nil, err
	}
	go func() {
		defer s.sides.done(c)
		f := side.NewFrameConn(c, grpcopt.MaxMessageBytes)
		var ch storev1.Chunk
		err := sendChunks(st, req.From, readStreamUnbounded, int(req.ChunkBytes), func(off int64, data []byte) error {
			ch.Offset = off
			return f.WriteParts(&ch, [][]byte{data})
		})
		if err == nil {
			err = f.CloseWrite()
		}
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			s.logger.Warn("read channel ended", "error", err)
		}
	}()
	return &storev1.ReadChannelResponse{FrameVersion: side.FrameVersion}, nil
}
