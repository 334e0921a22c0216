package transport

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// loopbackPair returns the two ends of a 127.0.0.1 TCP connection.
func loopbackPair(b *testing.B) (client, server net.Conn) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		server, _ = ln.Accept()
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	<-done
	if err != nil || server == nil {
		b.Fatalf("loopback pair: %v", err)
	}
	return client, server
}

var benchSizes = []int{4 << 10, DefaultBatchSize, 256 << 10}

// BenchmarkRawLoopback is the anchor: fixed-size writes, io.ReadFull on the
// other end, no framing (as shared/bench/tcpframe -mode stream).
func BenchmarkRawLoopback(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("body=%dK", size>>10), func(b *testing.B) {
			c, s := loopbackPair(b)
			buf := make([]byte, size)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				wbuf := make([]byte, size)
				for i := 0; i < b.N; i++ {
					if _, err := c.Write(wbuf); err != nil {
						return
					}
				}
			}()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := io.ReadFull(s, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			wg.Wait()
			c.Close()
			s.Close()
		})
	}
}

// BenchmarkFrameLoopback: FrameWriter -> 127.0.0.1 TCP -> FrameReader, the
// replication data path. Bytes counted are bodies only.
func BenchmarkFrameLoopback(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("body=%dK", size>>10), func(b *testing.B) {
			c, s := loopbackPair(b)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := make([]byte, size)
				fw := NewFrameWriter(c)
				var off int64
				for i := 0; i < b.N; i++ {
					if err := fw.WriteFrame(off, body); err != nil {
						return
					}
					off += int64(size)
				}
			}()
			fr := NewFrameReader(s, 0) // core's default limit: MaxBodyLimit
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			var want int64
			for i := 0; i < b.N; i++ {
				f, err := fr.Next()
				if err != nil {
					b.Fatal(err)
				}
				if f.Offset != want {
					b.Fatalf("offset %d, want %d", f.Offset, want)
				}
				want += int64(len(f.Body))
			}
			b.StopTimer()
			wg.Wait()
			c.Close()
			s.Close()
		})
	}
}

// BenchmarkFrameReaderParse measures parsing alone (no I/O).
func BenchmarkFrameReaderParse(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("body=%dK", size>>10), func(b *testing.B) {
			fr := NewFrameReader(&loopReader{b: AppendFrame(nil, 1, make([]byte, size))}, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := fr.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReportLoopback: ReportWriter -> TCP -> ReportReader, one report
// per read in the common case.
func BenchmarkReportLoopback(b *testing.B) {
	c, s := loopbackPair(b)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rw := NewReportWriter(c)
		for i := 1; i <= b.N; i++ {
			if err := rw.WriteReport(int64(i)); err != nil {
				return
			}
		}
		c.Close()
	}()
	rr := NewReportReader(s)
	b.ReportAllocs()
	b.ResetTimer()
	for {
		v, err := rr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if v == int64(b.N) {
			break
		}
	}
	b.StopTimer()
	wg.Wait()
	s.Close()
}
