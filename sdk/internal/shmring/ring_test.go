package shmring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// pair lays a producer and a consumer over one buffer (the two processes'
// mappings of one memfd).
func pair(t *testing.T, dataSize int) (p, c *Ring, mem []byte) {
	t.Helper()
	mem = make([]byte, HeaderSize+dataSize)
	p = newProducer(mem, nil)
	c, err := attach(mem, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, c, mem
}

func put(t *testing.T, p *Ring, off int64, data []byte) bool {
	t.Helper()
	room, ok, err := p.Reserve(len(data))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return false
	}
	copy(room, data)
	p.Publish(off)
	return true
}

// TestRingOrder: entries of many sizes, across many wraps, come out in
// order with their offsets and bytes; room comes back as they are consumed
// and a full ring refuses until then.
func TestRingOrder(t *testing.T) {
	p, c, _ := pair(t, MinData)
	var want [][]byte
	off := int64(0)
	got := 0
	for i := range 3000 {
		d := bytes.Repeat([]byte{byte(i)}, 1+(i*7919)%(p.MaxEntry()/3))
		for !put(t, p, off, d) {
			// Full: the consumer takes one entry.
			o, data, ok, err := c.Next()
			if err != nil || !ok {
				t.Fatalf("entry %d: a full ring has nothing to consume: %v", got, err)
			}
			if !bytes.Equal(data, want[got]) || o != offsetOf(want, got) {
				t.Fatalf("entry %d at %d: %d bytes, want %d at %d", got, o, len(data), len(want[got]), offsetOf(want, got))
			}
			c.Consume()
			got++
		}
		want = append(want, d)
		off += int64(len(d))
	}
	for ; got < len(want); got++ {
		o, data, ok, err := c.Next()
		if err != nil || !ok || !bytes.Equal(data, want[got]) || o != offsetOf(want, got) {
			t.Fatalf("entry %d: %v %v", got, ok, err)
		}
		c.Consume()
	}
	if _, _, ok, err := c.Next(); ok || err != nil {
		t.Fatalf("an empty ring gave an entry: %v", err)
	}
	if u, err := p.Unconsumed(); u != 0 || err != nil {
		t.Fatalf("unconsumed %d %v after everything was consumed", u, err)
	}
	if _, _, err := p.Reserve(p.MaxEntry() + 1); err == nil {
		t.Fatal("an entry above MaxEntry was reserved")
	}
}

func offsetOf(es [][]byte, i int) int64 {
	var o int64
	for _, e := range es[:i] {
		o += int64(len(e))
	}
	return o
}

// TestRingFlags: the doorbell and notification handshakes.
func TestRingFlags(t *testing.T) {
	p, c, _ := pair(t, MinData)
	if !p.TakeSleeping() {
		t.Fatal("a new ring's consumer is not asleep: the first entry would never be rung")
	}
	if p.TakeSleeping() {
		t.Fatal("the sleeping flag was taken twice")
	}
	c.Sleep()
	c.Awake()
	if p.TakeSleeping() {
		t.Fatal("the consumer woke by itself, and the producer still rings")
	}
	put(t, p, 0, make([]byte, 1000))
	put(t, p, 1000, make([]byte, 1000))
	p.SetWaiting(0) // tell me when empty
	for i := range 2 {
		if _, _, ok, err := c.Next(); !ok || err != nil {
			t.Fatal(ok, err)
		}
		c.Consume()
		if want := i == 1; c.NotifyWanted() != want {
			t.Fatalf("after entry %d: NotifyWanted %v, want %v", i, !want, want)
		}
	}
	if c.NotifyWanted() {
		t.Fatal("a notification was wanted twice")
	}
	if _, ok := p.Failure(); ok {
		t.Fatal("a failure before any")
	}
	c.Fail(bytes.Repeat([]byte("x"), 2*MaxErr))
	if d, ok := p.Failure(); !ok || len(d) != MaxErr {
		t.Fatalf("failure: %v, %d bytes", ok, len(d))
	}
}

// TestRingCorrupt: every value one side reads of the other's is checked:
// a bad one is ErrCorrupt, never a panic or a slice outside the area.
func TestRingCorrupt(t *testing.T) {
	ne := binary.NativeEndian
	entry := func(mem []byte, pos int, off uint64, n, kind uint32) {
		e := mem[HeaderSize+pos:]
		ne.PutUint64(e, off)
		ne.PutUint32(e[8:], n)
		ne.PutUint32(e[12:], kind)
	}
	for _, tc := range []struct {
		name string
		bad  func(mem []byte)
	}{
		{"head beyond the area", func(mem []byte) { ne.PutUint64(mem[offHead:], MinData+8) }},
		{"head not aligned", func(mem []byte) { ne.PutUint64(mem[offHead:], 20) }},
		{"head behind tail", func(mem []byte) { ne.PutUint64(mem[offTail:], 64); ne.PutUint64(mem[offHead:], 32) }},
		{"less than a header published", func(mem []byte) { ne.PutUint64(mem[offHead:], 8) }},
		{"entry longer than published", func(mem []byte) {
			entry(mem, 0, 0, 100, KindAppendAt)
			ne.PutUint64(mem[offHead:], 64)
		}},
		{"entry past the area's end", func(mem []byte) {
			entry(mem, 0, 0, MinData, KindAppendAt)
			ne.PutUint64(mem[offHead:], MinData)
		}},
		{"entry of 0 bytes", func(mem []byte) { entry(mem, 0, 0, 0, KindAppendAt); ne.PutUint64(mem[offHead:], 16) }},
		{"negative offset", func(mem []byte) { entry(mem, 0, 1<<63, 8, KindAppendAt); ne.PutUint64(mem[offHead:], 24) }},
		{"unknown kind", func(mem []byte) { entry(mem, 0, 0, 8, 9); ne.PutUint64(mem[offHead:], 24) }},
		{"wrap not published to the end", func(mem []byte) { entry(mem, 0, 0, 0, kindWrap); ne.PutUint64(mem[offHead:], 16) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := make([]byte, HeaderSize+MinData)
			newProducer(mem, nil)
			tc.bad(mem)
			c, err := attach(mem, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _, ok, err := c.Next()
			if !errors.Is(err, ErrCorrupt) || ok {
				t.Fatalf("Next: ok=%v %v, want ErrCorrupt", ok, err)
			}
		})
	}
	t.Run("tail the producer never published", func(t *testing.T) {
		p, _, mem := pair(t, MinData)
		put(t, p, 0, make([]byte, 100))
		ne.PutUint64(mem[offTail:], 1024)
		if _, _, err := p.Reserve(10); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Reserve with a tail ahead of head: %v", err)
		}
		if _, err := p.Unconsumed(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Unconsumed with a tail ahead of head: %v", err)
		}
	})
	t.Run("error length", func(t *testing.T) {
		p, _, mem := pair(t, MinData)
		ne.PutUint32(mem[offFailed:], 1)
		ne.PutUint32(mem[offErrLen:], 1<<31)
		if d, ok := p.Failure(); !ok || len(d) != MaxErr {
			t.Fatalf("failure with a huge length: %v %d", ok, len(d))
		}
	})
	for name, bad := range map[string]func(mem []byte){
		"magic":     func(mem []byte) { mem[0] = 'X' },
		"version":   func(mem []byte) { ne.PutUint32(mem[offVersion:], 2) },
		"header":    func(mem []byte) { ne.PutUint32(mem[offHdrSize:], 64) },
		"data size": func(mem []byte) { ne.PutUint64(mem[offDataSize:], MinData*2) },
		"tail":      func(mem []byte) { ne.PutUint64(mem[offTail:], 3) },
	} {
		t.Run("attach "+name, func(t *testing.T) {
			mem := make([]byte, HeaderSize+MinData)
			newProducer(mem, nil)
			bad(mem)
			if _, err := attach(mem, nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("attach: %v", err)
			}
		})
	}
	if _, err := attach(make([]byte, HeaderSize), nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("attach of a mapping too small: %v", err)
	}
}

// FuzzRingConsume: whatever the producer's half of the ring holds, the
// consumer returns entries inside the data area or ErrCorrupt.
func FuzzRingConsume(f *testing.F) {
	mem := make([]byte, HeaderSize+MinData)
	p := newProducer(mem, nil)
	for i := range 5 {
		room, _, _ := p.Reserve(1000 * (i + 1))
		copy(room, fmt.Sprint("entry ", i))
		p.Publish(int64(i) << 20)
	}
	f.Add(uint64(0), p.head, mem[HeaderSize:HeaderSize+2048])
	f.Add(uint64(MinData-8), uint64(MinData+40), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, tail, head uint64, data []byte) {
		mem := make([]byte, HeaderSize+MinData)
		newProducer(mem, nil)
		copy(mem[HeaderSize:], data)
		if len(data) > 0 { // the fuzzer's bytes also go at the area's end
			copy(mem[len(mem)-min(len(data), MinData):], data)
		}
		binary.NativeEndian.PutUint64(mem[offTail:], tail&^7)
		binary.NativeEndian.PutUint64(mem[offHead:], head)
		c, err := attach(mem, nil)
		if err != nil {
			return
		}
		for range 64 {
			off, d, ok, err := c.Next()
			if err != nil || !ok {
				return
			}
			if off < 0 || len(d) == 0 || len(d) > MinData {
				t.Fatalf("entry at %d of %d bytes", off, len(d))
			}
			c.Consume()
		}
	})
}
