package plugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/sdk/plugin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPluginSideChannel: the host accepts only the connection that
// presents the token, in a private directory it removes afterwards.
func TestPluginSideChannel(t *testing.T) {
	l, err := plugin.ListenSide()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(l.Path))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("side channel directory: %v %v", fi.Mode(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		ok  bool
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		if c != nil {
			buf := make([]byte, 5)
			_, rerr := c.Read(buf)
			c.Close()
			got <- res{string(buf) == "hello" && rerr == nil, err}
			return
		}
		got <- res{false, err}
	}()
	wrong := make([]byte, plugin.TokenSize)
	bad, err := plugin.DialSide(ctx, l.Path, wrong)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	good, err := plugin.DialSide(ctx, l.Path, l.Token)
	if err != nil {
		t.Fatal(err)
	}
	good.Write([]byte("hello"))
	defer good.Close()
	if r := <-got; !r.ok || r.err != nil {
		t.Fatalf("accept: %+v", r)
	}
	if _, err := os.Stat(l.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after the accept: %v", err)
	}
	if _, err := plugin.DialSide(ctx, l.Path, l.Token); !errors.Is(err, plugin.ErrSideChannel) {
		t.Fatalf("second dial: %v, want ErrSideChannel", err)
	}
}

// TestPluginSideChannelCancel: Accept gives up when its ctx ends.
func TestPluginSideChannelCancel(t *testing.T) {
	l, err := plugin.ListenSide()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, plugin.ErrSideChannel) {
		t.Fatalf("Accept with a cancelled ctx: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(l.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory left behind: %v", err)
	}
}
