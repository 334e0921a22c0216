package plugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Side channels: a plain unix socket between the host and a plugin, next to
// go-plugin's gRPC connection, for what gRPC cannot carry or carries too
// slowly (file descriptors for transport plugins, the append stream of
// store plugins). The host listens on a fresh socket in a private directory
// (mode 0700) and sends the path and a random token on the gRPC control
// plane (under AutoMTLS when the host enables it); the plugin dials the path
// and writes the token first; the host accepts the first connection that
// presents it, then removes the socket. The channel exists only between the
// two processes.

// TokenSize is the length of a side channel's token.
const TokenSize = 32

// ErrSideChannel marks a side channel that could not be set up.
var ErrSideChannel = errors.New("plugin: side channel")

// SideListener is the host's end of a side channel being set up.
type SideListener struct {
	Path  string // the socket to send to the plugin
	Token []byte // the token to send with it

	ln   *net.UnixListener
	dir  string
	once sync.Once
}

// ListenSide creates a side channel socket in a new private directory.
func ListenSide() (*SideListener, error) {
	dir, err := os.MkdirTemp("", "replicator-side-")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSideChannel, err)
	}
	path := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: listen: %v", ErrSideChannel, err)
	}
	ln.SetUnlinkOnClose(true)
	tok := make([]byte, TokenSize)
	rand.Read(tok)
	return &SideListener{Path: path, Token: tok, ln: ln, dir: dir}, nil
}

// Accept waits (until ctx ends) for the plugin's connection with the token,
// then closes the listener and removes its directory. Connections without
// the token are dropped.
func (l *SideListener) Accept(ctx context.Context) (*net.UnixConn, error) {
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.ln.SetDeadline(time.Now()) })
	defer stop()
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: accept: %w", ErrSideChannel, ctx.Err())
			}
			return nil, fmt.Errorf("%w: accept: %v", ErrSideChannel, err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, TokenSize)
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, l.Token) {
			c.Close()
			continue
		}
		c.SetReadDeadline(time.Time{})
		return c, nil
	}
}

// Close removes the socket and its directory. Idempotent.
func (l *SideListener) Close() {
	l.once.Do(func() {
		l.ln.Close()
		os.RemoveAll(l.dir)
	})
}

// DialSide is the plugin's end: it connects to the host's side channel and
// presents the token.
func DialSide(ctx context.Context, path string, token []byte) (*net.UnixConn, error) {
	if len(token) != TokenSize {
		return nil, fmt.Errorf("%w: token of %d bytes, want %d", ErrSideChannel, len(token), TokenSize)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrSideChannel, path, err)
	}
	uc := c.(*net.UnixConn)
	if _, err := uc.Write(token); err != nil {
		uc.Close()
		return nil, fmt.Errorf("%w: token: %v", ErrSideChannel, err)
	}
	return uc, nil
}
