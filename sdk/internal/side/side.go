package side

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

// TokenSize is the length of a side channel's token.
const TokenSize = 32

// tokenWait bounds how long Accept waits for a connection's token.
const tokenWait = 5 * time.Second

// ErrSetup marks a side channel that could not be set up.
var ErrSetup = errors.New("plugin: side channel")

// Listener is the host's end of a side channel being set up.
type Listener struct {
	Path  string // the socket to send to the plugin
	Token []byte // the token to send with it

	ln   *net.UnixListener
	dir  string
	once sync.Once
}

// Listen creates a side channel socket in a new private directory.
func Listen() (*Listener, error) {
	dir, err := os.MkdirTemp("", "replicator-side-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	path := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: listen: %w", ErrSetup, err)
	}
	ln.SetUnlinkOnClose(true)
	tok := make([]byte, TokenSize)
	rand.Read(tok)
	return &Listener{Path: path, Token: tok, ln: ln, dir: dir}, nil
}

// Accept waits (until ctx ends) for the plugin's connection with the token,
// then closes the listener and removes its directory. Connections without
// the token are dropped.
func (l *Listener) Accept(ctx context.Context) (*net.UnixConn, error) {
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.ln.SetDeadline(time.Now()) })
	defer stop()
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: accept: %w", ErrSetup, ctx.Err())
			}
			return nil, fmt.Errorf("%w: accept: %w", ErrSetup, err)
		}
		c.SetReadDeadline(time.Now().Add(tokenWait))
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
func (l *Listener) Close() {
	l.once.Do(func() {
		l.ln.Close()
		os.RemoveAll(l.dir)
	})
}

// Dial is the plugin's end: it connects to the host's side channel and
// presents the token.
func Dial(ctx context.Context, path string, token []byte) (*net.UnixConn, error) {
	if len(token) != TokenSize {
		return nil, fmt.Errorf("%w: token of %d bytes, want %d", ErrSetup, len(token), TokenSize)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrSetup, path, err)
	}
	uc := c.(*net.UnixConn)
	if _, err := uc.Write(token); err != nil {
		uc.Close()
		return nil, fmt.Errorf("%w: token: %w", ErrSetup, err)
	}
	return uc, nil
}
