package transport

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestReadVecBuffers: ReadVec on a socket fills its buffers in order,
// skipping empty ones, through the raw readv (up to rawIovecs buffers) and
// through unix.Readv (more), and reports the end of the stream as io.EOF.
func TestReadVecBuffers(t *testing.T) {
	for _, nbufs := range []int{1, 3, rawIovecs, rawIovecs + 3} {
		c, srv := tcpPair(t)
		r := NewConnReader(c, time.Minute)
		want := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
		if _, err := srv.Write(want); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		var got []byte
		for {
			bufs := make([][]byte, nbufs)
			for i := range bufs {
				if i%2 == 1 {
					bufs[i] = []byte{} // empty buffers are skipped
				} else {
					bufs[i] = make([]byte, 3)
				}
			}
			n, err := r.ReadVec(bufs)
			for _, b := range bufs {
				k := min(n, len(b))
				got = append(got, b[:k]...)
				n -= k
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%d buffers: %v", nbufs, err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d buffers: read %q, want %q", nbufs, got, want)
		}
	}
}
