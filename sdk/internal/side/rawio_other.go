//go:build !linux

package side

import (
	"io"
	"net"
)

// sockIO returns how a FrameConn reads c and writes vectors to it: net.Conn's
// own Read and writev (the raw system calls are Linux's, rawio_linux.go).
func sockIO(c *net.UnixConn) (io.Reader, func([][]byte) error) {
	return c, netWritev(c)
}
