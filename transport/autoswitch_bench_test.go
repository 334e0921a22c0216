package transport

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// autoSwitchStream is n transfer frames of size bytes each.
func autoSwitchStream(n, size int) []byte {
	var b []byte
	var h [TransferHeaderSize]byte
	body := make([]byte, size)
	for i := range n {
		PutTransferHeader(h[:], TransferHeader{Offset: int64(i * size), Size: int32(size), Epoch: 3,
			EpochStartOffset: 0, ConfirmOffset: int64(i * size)})
		b = append(append(b, h[:]...), body...)
	}
	return b
}

// BenchmarkHeaderParse compares the slave's parse path of the classic
// 12-byte header with the AutoSwitch 36-byte transfer header (no I/O: the
// stream loops in memory), so the cost of the protocol's larger header is
// read in the same run: compare classic= and autoswitch= at the same body.
func BenchmarkHeaderParse(b *testing.B) {
	for _, size := range []int{0, 4 << 10, DefaultBatchSize} {
		b.Run(fmt.Sprintf("classic/body=%dK", size>>10), func(b *testing.B) {
			fr := NewFrameReader(&loopReader{b: AppendFrame(nil, 1, make([]byte, size))}, 0)
			b.SetBytes(int64(HeaderSize + size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fr.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("autoswitch/body=%dK", size>>10), func(b *testing.B) {
			mr := NewMasterFrameReader(&loopReader{b: autoSwitchStream(1, size)}, 0)
			b.SetBytes(int64(TransferHeaderSize + size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := mr.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDirectHeader compares DirectReader (classic) with
// AutoSwitchDirectReader over 64 frames of 32 KiB each, bodies read into a
// destination buffer, as a slave applying them does.
func BenchmarkDirectHeader(b *testing.B) {
	const n = 64
	dst := make([]byte, DefaultBatchSize)
	b.Run("classic", func(b *testing.B) {
		var fs []testFrame
		for i := range n {
			fs = append(fs, testFrame{int64(i) * DefaultBatchSize, make([]byte, DefaultBatchSize)})
		}
		stream := encodeFrames(fs)
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		for b.Loop() {
			dr := NewDirectReader(ReaderVec{R: bytes.NewReader(stream)}, 0)
			for {
				h, err := dr.Next()
				if err != nil {
					break
				}
				if _, err := io.ReadFull(dr, dst[:h.Size]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("autoswitch", func(b *testing.B) {
		stream := autoSwitchStream(n, DefaultBatchSize)
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		for b.Loop() {
			d := NewAutoSwitchDirectReader(ReaderVec{R: bytes.NewReader(stream)}, 0)
			for {
				f, err := d.Next()
				if err != nil {
					break
				}
				if _, err := io.ReadFull(d, dst[:f.Transfer.Size]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkAutoSwitchLoopback is BenchmarkFrameLoopback for the AutoSwitch
// protocol: 36-byte transfer headers and bodies written with one vectored
// write each, 127.0.0.1 TCP, MasterFrameReader on the other end. Compare
// with BenchmarkFrameLoopback at the same body size in the same run.
func BenchmarkAutoSwitchLoopback(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("body=%dK", size>>10), func(b *testing.B) {
			c, s := loopbackPair(b)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := make([]byte, size)
				var hdr [TransferHeaderSize]byte
				vec := make([][]byte, 2)
				var bufs net.Buffers // escapes once, not per frame
				var off int64
				for i := 0; i < b.N; i++ {
					PutTransferHeader(hdr[:], TransferHeader{Offset: off, Size: int32(size), Epoch: 2, ConfirmOffset: off})
					vec[0], vec[1] = hdr[:], body
					bufs = vec[:2]
					if _, err := bufs.WriteTo(c); err != nil {
						return
					}
					off += int64(size)
				}
			}()
			mr := NewMasterFrameReader(s, 0)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			var want int64
			for i := 0; i < b.N; i++ {
				f, err := mr.Next()
				if err != nil {
					b.Fatal(err)
				}
				if f.Transfer.Offset != want {
					b.Fatalf("offset %d, want %d", f.Transfer.Offset, want)
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
