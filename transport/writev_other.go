//go:build !linux

package transport

import (
	"io"
	"net"
)

// rawWriter: the raw vectored write is Linux-only; elsewhere rawWriterFor
// finds none and FrameBatch writes through net.Buffers.
type rawWriter struct{ w io.Writer }

func rawWriterFor(*rawWriter, io.Writer) *rawWriter { return nil }

func (r *rawWriter) writev(bufs [][]byte) (int64, error) {
	nb := net.Buffers(bufs)
	return nb.WriteTo(r.w)
}
