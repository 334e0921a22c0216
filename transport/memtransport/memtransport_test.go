package memtransport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		return NewNetwork(Config{Seed: 1}).Transport("slave")
	})
}

func TestMemConformanceInBubble(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		return NewNetwork(Config{Seed: 1}).Transport("slave")
	}, transporttest.InBubble())
}

// Split writes, delay and jitter together still deliver every byte in order
// and keep the stream semantics.
func TestMemConformanceWithFaults(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		f := Faults{Delay: time.Millisecond, Jitter: time.Millisecond, SplitWrites: 4000}
		return NewNetwork(Config{Seed: 7, BufferSize: 4096, Faults: f}).Transport("slave")
	}, transporttest.InBubble())
}

// setup returns a connected (slave, master) pair on link slave -> mem:master.
func setup(t *testing.T, cfg Config, f Faults) (nw *Network, link *Link, slave, master net.Conn) {
	t.Helper()
	nw = NewNetwork(cfg)
	ln, err := nw.Transport("master").Listen("mem:master")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	link = nw.Link("slave", "mem:master")
	link.SetFaults(f)
	slave, err = nw.Transport("slave").Dial(context.Background(), "mem:master")
	if err != nil {
		t.Fatal(err)
	}
	master, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close(); master.Close() })
	return nw, link, slave, master
}

func TestMemDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, s, m := setup(t, Config{}, Faults{Delay: 40 * time.Millisecond})
		start := time.Now()
		if _, err := s.Write([]byte("ack!")); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("Write blocked %v under delay", el)
		}
		buf := make([]byte, 8)
		n, err := m.Read(buf)
		if err != nil || string(buf[:n]) != "ack!" {
			t.Fatalf("read %q %v", buf[:n], err)
		}
		if el := time.Since(start); el != 40*time.Millisecond {
			t.Fatalf("delivered after %v, want exactly 40ms", el)
		}
		// A read deadline before the delivery time fires first.
		s.Write([]byte("late"))
		m.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := m.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want a timeout", err)
		}
		m.SetReadDeadline(time.Time{})
		n, err = m.Read(buf)
		if err != nil || string(buf[:n]) != "late" || time.Since(start) != 80*time.Millisecond {
			t.Fatalf("read %q %v at %v", buf[:n], err, time.Since(start))
		}
	})
}

func TestMemJitterKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, s, m := setup(t, Config{Seed: 3}, Faults{Delay: time.Millisecond, Jitter: 50 * time.Millisecond, SplitWrites: 3})
		var want []byte
		for i := range 200 {
			b := []byte{byte(i), byte(i >> 8)}
			want = append(want, b...)
			s.Write(b)
		}
		s.Close()
		got, err := io.ReadAll(m)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("order lost: %v", err)
		}
	})
}

// readSizes reads everything from c and returns the size of each Read.
func readSizes(t *testing.T, c net.Conn) (sizes []int, data []byte) {
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			sizes = append(sizes, n)
			data = append(data, buf[:n]...)
		}
		if err == io.EOF {
			return sizes, data
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestMemSplitWritesDeterministic(t *testing.T) {
	run := func(seed uint64) []int {
		var sizes []int
		synctest.Test(t, func(t *testing.T) {
			_, _, s, m := setup(t, Config{Seed: seed}, Faults{SplitWrites: 5})
			var stream []byte
			fw := transport.NewFrameWriter(s)
			go func() {
				for i := range 20 {
					fw.WriteFrame(int64(i)*10, bytes.Repeat([]byte{byte(i)}, 10))
				}
				s.Close()
			}()
			for i := range 20 {
				stream = transport.AppendFrame(stream, int64(i)*10, bytes.Repeat([]byte{byte(i)}, 10))
			}
			var data []byte
			sizes, data = readSizes(t, m)
			if !bytes.Equal(data, stream) {
				t.Fatal("split stream differs")
			}
			for _, n := range sizes {
				if n < 1 || n > 5 {
					t.Fatalf("piece of %d bytes with SplitWrites 5", n)
				}
			}
		})
		return sizes
	}
	a, b, c := run(11), run(11), run(12)
	if !equal(a, b) {
		t.Fatalf("same seed, different pieces:\n%v\n%v", a, b)
	}
	if equal(a, c) {
		t.Fatal("different seeds, same pieces")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Without SplitWrites a Read gathers every delivered write, as TCP does:
// the master's reader then sees only the last report.
func TestMemReadCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, s, m := setup(t, Config{}, Faults{})
		rw := transport.NewReportWriter(s)
		for _, v := range []int64{100, 200, 300} {
			rw.WriteReport(v)
		}
		v, err := transport.NewReportReader(m).Next()
		if err != nil || v != 300 {
			t.Fatalf("got %d %v, want the last report 300", v, err)
		}
	})
}

func TestMemPartitionHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw, link, s, m := setup(t, Config{BufferSize: 1000}, Faults{})
		link.Partition()
		// Writes buffer up to BufferSize, then block.
		written := make(chan int, 1)
		go func() {
			n, _ := m.Write(make([]byte, 2500))
			written <- n
		}()
		synctest.Wait()
		select {
		case n := <-written:
			t.Fatalf("Write of 2500 bytes returned %d during a partition", n)
		default:
		}
		// Nothing is delivered; the read deadline fires after exactly 20 s.
		start := time.Now()
		s.SetReadDeadline(start.Add(20 * time.Second))
		if _, err := s.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != 20*time.Second {
			t.Fatalf("read during partition: %v after %v", err, time.Since(start))
		}
		// New dials wait: until their ctx ends...
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := nw.Transport("slave").Dial(ctx, "mem:master"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial during partition: %v", err)
		}
		// ... or until Heal, when everything flows again, in order.
		dialed := make(chan error, 1)
		go func() {
			c, err := nw.Transport("slave").Dial(context.Background(), "mem:master")
			if err == nil {
				c.Close()
			}
			dialed <- err
		}()
		time.Sleep(time.Minute)
		link.Heal()
		s.SetReadDeadline(time.Time{})
		if _, err := io.ReadFull(s, make([]byte, 2500)); err != nil {
			t.Fatal(err)
		}
		if n := <-written; n != 2500 {
			t.Fatalf("Write returned %d", n)
		}
		if err := <-dialed; err != nil {
			t.Fatalf("dial after heal: %v", err)
		}
	})
}

func TestMemPartitionHoldsEOF(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, link, s, m := setup(t, Config{}, Faults{})
		link.Partition()
		m.Write([]byte("last words"))
		m.Close()
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(s)
			got <- b
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("EOF crossed a partition")
		default:
		}
		link.Heal()
		if b := <-got; string(b) != "last words" {
			t.Fatalf("got %q", b)
		}
	})
}

func isReset(err error) bool {
	return errors.Is(err, ErrReset) && errors.Is(err, syscall.ECONNRESET)
}

func TestMemReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, link, s, m := setup(t, Config{}, Faults{})
		m.Write([]byte("in flight"))
		readErr := make(chan error, 1)
		go func() {
			_, err := m.Read(make([]byte, 1)) // blocked: the slave sends nothing
			readErr <- err
		}()
		synctest.Wait()
		if n := link.Reset(); n != 1 {
			t.Fatalf("reset %d conns", n)
		}
		if err := <-readErr; !isReset(err) {
			t.Fatalf("blocked read: %v", err)
		}
		if _, err := s.Read(make([]byte, 10)); !isReset(err) {
			t.Fatalf("read after reset: %v (in-flight bytes must be lost)", err)
		}
		if _, err := s.Write([]byte("x")); !isReset(err) {
			t.Fatalf("write after reset: %v", err)
		}
		if link.Conns() != 0 || link.Reset() != 0 {
			t.Fatal("reset connection still counted")
		}
	})
}

// ResetAfterBytes cuts a frame in the middle: the slave's FrameReader sees
// the reset, never a clean io.EOF.
func TestMemResetMidFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, s, m := setup(t, Config{}, Faults{ResetAfterBytes: 8 + 12 + 50})
		if err := transport.NewReportWriter(s).WriteReport(0); err != nil {
			t.Fatal(err)
		}
		fw := transport.NewFrameWriter(m)
		werr := make(chan error, 1)
		go func() { werr <- fw.WriteFrame(0, make([]byte, 100)) }()
		if err := <-werr; !isReset(err) {
			t.Fatalf("writer: %v", err)
		}
		_, err := transport.NewFrameReader(s, 0).Next()
		if !isReset(err) || errors.Is(err, io.EOF) {
			t.Fatalf("reader: %v", err)
		}
	})
}

func TestMemResetProbabilityDeterministic(t *testing.T) {
	run := func(seed uint64) int {
		writes := 0
		synctest.Test(t, func(t *testing.T) {
			_, _, s, m := setup(t, Config{Seed: seed}, Faults{ResetProbability: 0.05})
			go io.Copy(io.Discard, m)
			for {
				if _, err := s.Write([]byte("12345678")); err != nil {
					if !isReset(err) {
						t.Fatal(err)
					}
					return
				}
				writes++
			}
		})
		return writes
	}
	a, b := run(5), run(5)
	if a != b {
		t.Fatalf("same seed: reset after %d and %d writes", a, b)
	}
	seen := map[int]bool{}
	for seed := range uint64(5) {
		seen[run(seed+100)] = true
	}
	if len(seen) < 2 {
		t.Fatal("reset point does not depend on the seed")
	}
}

func TestMemObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var evs []Event
		cfg := Config{Observe: func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			e.Data = bytes.Clone(e.Data)
			evs = append(evs, e)
		}}
		_, link, s, m := setup(t, cfg, Faults{SplitWrites: 2})
		transport.NewReportWriter(s).WriteReport(7)
		transport.NewFrameWriter(m).WriteFrame(7, []byte("abc"))
		m.Close()
		link.Reset()
		mu.Lock()
		defer mu.Unlock()
		var kinds []EventKind
		var up, down []byte
		for _, e := range evs {
			if e.From != "slave" || e.To != "mem:master" || e.Conn != 1 {
				t.Fatalf("event %+v", e)
			}
			kinds = append(kinds, e.Kind)
			if e.Kind == EventData {
				if e.ToListener {
					up = append(up, e.Data...)
				} else {
					down = append(down, e.Data...)
				}
			}
		}
		want := []EventKind{EventConnect, EventData, EventData, EventData, EventClose, EventReset}
		if len(kinds) != len(want) {
			t.Fatalf("events %v, want %v", kinds, want)
		}
		for i := range want {
			if kinds[i] != want[i] {
				t.Fatalf("events %v, want %v", kinds, want)
			}
		}
		if !bytes.Equal(up, []byte{0, 0, 0, 0, 0, 0, 0, 7}) || !bytes.Equal(down, transport.AppendFrame(nil, 7, []byte("abc"))) {
			t.Fatalf("observed up % x down % x", up, down)
		}
	})
}

func TestMemListenDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork(Config{Backlog: 1})
		tr := nw.Transport("slave")
		if _, err := tr.Dial(context.Background(), "mem:nobody"); !errors.Is(err, ErrRefused) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial nobody: %v", err)
		}
		ln, err := nw.Transport("master").Listen("mem:master")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if _, err := tr.Listen("mem:master"); !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("second listen: %v", err)
		}
		if _, err := tr.Listen(""); err == nil {
			t.Fatal("empty address accepted")
		}
		a, _ := tr.Listen("10.0.0.1:0")
		b, _ := tr.Listen("10.0.0.1:0")
		defer a.Close()
		defer b.Close()
		if a.Addr().String() == b.Addr().String() || a.Addr().String() != "10.0.0.1:32769" || a.Addr().Network() != "mem" {
			t.Fatalf("ephemeral addresses %v %v", a.Addr(), b.Addr())
		}
		// Backlog 1: the second dial waits for an Accept.
		c1, err := tr.Dial(context.Background(), "mem:master")
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		if c1.LocalAddr().String() != "slave#1" || c1.RemoteAddr().String() != "mem:master" {
			t.Fatalf("addresses %v -> %v", c1.LocalAddr(), c1.RemoteAddr())
		}
		dialed := make(chan net.Conn, 1)
		go func() {
			c, _ := tr.Dial(context.Background(), "mem:master")
			dialed <- c
		}()
		synctest.Wait()
		if len(dialed) != 0 {
			t.Fatal("dial went past a full backlog")
		}
		s1, _ := ln.Accept()
		defer s1.Close()
		c2 := <-dialed
		defer c2.Close()
		// Closing the listener resets the connection not yet accepted.
		ln.Close()
		if _, err := c2.Read(make([]byte, 1)); !isReset(err) {
			t.Fatalf("unaccepted conn after listener close: %v", err)
		}
	})
}
