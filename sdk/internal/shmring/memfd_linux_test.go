package shmring

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemfd: a ring made by Create and mapped again by Attach (as the
// plugin maps the descriptor it received) is one ring; a memfd without the
// seals, or of a size out of bounds, is refused.
func TestMemfd(t *testing.T) {
	p, f, err := Create(MinData)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := Attach(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	room, ok, err := p.Reserve(5)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	copy(room, "hello")
	p.Publish(42)
	off, data, ok, err := c.Next()
	if !ok || err != nil || off != 42 || !bytes.Equal(data, []byte("hello")) {
		t.Fatalf("through the memfd: %d %q %v %v", off, data, ok, err)
	}
	c.Consume()
	if u, err := p.Unconsumed(); u != 0 || err != nil {
		t.Fatalf("unconsumed %d %v", u, err)
	}
	if _, _, err := Create(MinData + 3); err == nil {
		t.Fatal("a data size that is not a multiple of 8 was taken")
	}

	unsealed := func(size int64) *os.File {
		fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "unsealed")
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return f
	}
	u := unsealed(HeaderSize + MinData)
	defer u.Close()
	if _, err := Attach(u); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an unsealed memfd: %v", err)
	}
	reg, err := os.Create(t.TempDir() + "/ring")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	reg.Truncate(HeaderSize + MinData)
	if _, err := Attach(reg); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a plain file: %v", err)
	}
}
