package transportplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/internal/backoff"
	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/transportv1"
	"github.com/replicatorhq/replicator/transport"
)

// server adapts the control-plane calls onto the plugin's transport and
// hands every connection to the host.
type server struct {
	transportv1.UnimplementedTransportServer
	open Opener
	log  hclog.Logger

	mu     sync.Mutex
	tr     transport.Transport
	ch     *fdSender
	lns    map[uint64]*srvListener // by host-chosen id
	closed bool
}

type srvListener struct {
	ln      net.Listener
	stopped chan struct{} // closed by CloseListener / Close
	done    chan struct{} // closed when the accept loop has returned
}

func newServer(open Opener, log hclog.Logger) *server {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &server{open: open, log: log, lns: map[uint64]*srvListener{}}
}

func (s *server) Open(ctx context.Context, req *transportv1.OpenRequest) (*transportv1.OpenResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tr != nil || s.closed {
		return nil, status.Error(codes.AlreadyExists, "transportplugin: transport already opened")
	}
	if s.open == nil {
		return nil, status.Error(codes.Internal, "transportplugin: plugin has no Opener")
	}
	if !fdSupported {
		return nil, status.Error(codes.Unimplemented, "transportplugin: this system cannot pass descriptors")
	}
	c, err := side.Dial(ctx, req.FdSocket, req.Token)
	if err != nil {
		return nil, toStatus(err)
	}
	tr, err := s.open(ctx, OpenRequest{Options: req.Options, Logger: s.log})
	if err != nil {
		c.Close()
		return nil, toStatus(err)
	}
	s.tr, s.ch = tr, &fdSender{c: c}
	return &transportv1.OpenResponse{}, nil
}

func (s *server) transport() (transport.Transport, *fdSender, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, toStatus(ErrClosed)
	}
	if s.tr == nil {
		return nil, nil, status.Error(codes.FailedPrecondition, "transportplugin: transport is not open (Open must come first)")
	}
	return s.tr, s.ch, nil
}

func (s *server) Listen(_ context.Context, req *transportv1.ListenRequest) (*transportv1.ListenResponse, error) {
	tr, ch, err := s.transport()
	if err != nil {
		return nil, err
	}
	ln, err := tr.Listen(req.Addr)
	if err != nil {
		return nil, toStatus(err)
	}
	l := &srvListener{ln: ln, stopped: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil, toStatus(ErrClosed)
	}
	id := req.Id
	if _, dup := s.lns[id]; dup || id == 0 {
		s.mu.Unlock()
		ln.Close()
		return nil, status.Errorf(codes.InvalidArgument, "transportplugin: listener id %d in use", id)
	}
	s.lns[id] = l
	s.mu.Unlock()
	go s.acceptLoop(id, l, ch)
	return &transportv1.ListenResponse{Network: ln.Addr().Network(), Addr: ln.Addr().String()}, nil
}

// acceptLoop hands every accepted connection to the host until the
// listener is stopped or fails for good.
func (s *server) acceptLoop(id uint64, l *srvListener, ch *fdSender) {
	defer close(l.done)
	var bo backoff.Backoff
	for {
		c, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.stopped:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				s.log.Warn("listener stopped on its own", "addr", l.ln.Addr().String(), "error", err)
				if err := ch.sendEnd(id); err != nil {
					s.log.Error("cannot tell the host a listener stopped", "error", err)
				}
				return
			}
			d := bo.Next()
			s.log.Warn("accept failed; retrying", "addr", l.ln.Addr().String(), "error", err, "backoff", d)
			if !backoff.Sleep(d, l.stopped) {
				return
			}
			continue
		}
		bo.Reset()
		if err := ch.send(recAccepted, id, c); err != nil {
			s.log.Error("cannot hand an accepted connection to the host; dropping it", "remote", c.RemoteAddr().String(), "error", err)
		}
		c.Close() // the host has its own descriptor now
	}
}

func (s *server) CloseListener(_ context.Context, req *transportv1.CloseListenerRequest) (*transportv1.CloseListenerResponse, error) {
	s.mu.Lock()
	l := s.lns[req.Id]
	delete(s.lns, req.Id)
	s.mu.Unlock()
	if l == nil {
		return nil, status.Errorf(codes.NotFound, "transportplugin: no listener %d", req.Id)
	}
	err := stopListener(l)
	return &transportv1.CloseListenerResponse{}, toStatus(err)
}

func stopListener(l *srvListener) error {
	close(l.stopped)
	err := l.ln.Close()
	<-l.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (s *server) Dial(ctx context.Context, req *transportv1.DialRequest) (*transportv1.DialResponse, error) {
	tr, ch, err := s.transport()
	if err != nil {
		return nil, err
	}
	c, err := tr.Dial(ctx, req.Addr)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return nil, toStatus(err)
	}
	err = ch.send(recDialed, req.Id, c)
	c.Close() // the host has its own descriptor now
	if err != nil {
		return nil, toStatus(fmt.Errorf("transportplugin: dial %s: %w", req.Addr, err))
	}
	return &transportv1.DialResponse{}, nil
}

func (s *server) Close(context.Context, *transportv1.CloseRequest) (*transportv1.CloseResponse, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, toStatus(ErrClosed)
	}
	s.closed = true
	lns := s.lns
	s.lns = nil
	tr, ch := s.tr, s.ch
	s.mu.Unlock()
	var errs []error
	for _, l := range lns {
		errs = append(errs, stopListener(l))
	}
	if ch != nil {
		errs = append(errs, ch.close())
	}
	if c, ok := tr.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return &transportv1.CloseResponse{}, toStatus(errors.Join(errs...))
}
