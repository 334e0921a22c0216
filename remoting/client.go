package remoting

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed: the client or server was closed.
var ErrClosed = errors.New("remoting: closed")

// DefaultCallTimeout bounds one call whose ctx has no deadline: RocketMQ's
// slave waits 3 s for each metadata answer.
const DefaultCallTimeout = 3 * time.Second

// Client calls a remoting server over one connection, one call at a time
// (RocketMQ's invokeSync). It is safe for concurrent use; calls are
// serialised.
type Client struct {
	mu     sync.Mutex
	conn   net.Conn
	r      *Reader
	opaque int32
	closed atomic.Bool
	buf    []byte
}

// NewClient returns a client on conn whose answers are bounded by maxFrame
// (0 means DefaultMaxFrameSize). The client owns conn.
func NewClient(conn net.Conn, maxFrame int) *Client {
	return &Client{conn: conn, r: NewReader(conn, maxFrame)}
}

// Invoke sends req as a request (it sets Opaque and clears the response
// bit) and returns the response with the same opaque; responses with other
// opaques (of calls abandoned earlier) are skipped. The call ends at ctx's
// deadline, or after DefaultCallTimeout when it has none. A oneway request
// returns (nil, nil) once written. Any failure leaves the connection
// unusable: close the client.
func (c *Client) Invoke(ctx context.Context, req *Command) (*Command, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, ErrClosed
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("remoting: set deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.opaque++
	req.Opaque = c.opaque
	req.Flag &^= FlagResponse
	var err error
	if c.buf, err = AppendFrame(c.buf[:0], req); err != nil {
		return nil, err
	}
	if _, err := c.conn.Write(c.buf); err != nil {
		return nil, c.fail("send", req, ctx, err)
	}
	if len(c.buf) > 64<<10 {
		c.buf = nil
	}
	if req.IsOneway() {
		return nil, nil
	}
	for {
		resp, err := c.r.Read()
		if err != nil {
			return nil, c.fail("read answer to", req, ctx, err)
		}
		if !resp.IsResponse() || resp.Opaque != req.Opaque {
			continue
		}
		if resp.Body != nil {
			resp.Body = append([]byte(nil), resp.Body...) // the reader reuses its buffer
		}
		return resp, nil
	}
}

func (c *Client) fail(op string, req *Command, ctx context.Context, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("remoting: %s request %d (opaque %d) to %s: %w", op, req.Code, req.Opaque, c.conn.RemoteAddr(), err)
}

// Close closes the connection. It is idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	// Not under mu: a call in progress ends with the closed connection.
	return c.conn.Close()
}
