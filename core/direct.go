package core

import (
	"io"
)

// reportEvery bounds the bytes applied between two reports while the
// socket never runs dry (a catch-up at full speed), so that the master's
// view of the slave keeps moving.
const reportEvery = 1 << 20

// bodyReader remembers the read error that made AppendAtFrom fail, to tell
// a broken connection from a failed store.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}
