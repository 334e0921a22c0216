//go:build unix

package transportplugin

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// fdSupported reports whether this system can pass descriptors.
const fdSupported = true

// fdSender writes records, each with at most one descriptor, on the
// plugin's end of the descriptor channel.
type fdSender struct {
	mu sync.Mutex
	c  *net.UnixConn
}

// send hands conn's socket to the host as a record of type typ tagged id.
// The plugin's own descriptor stays open: the caller closes conn after.
func (s *fdSender) send(typ byte, id uint64, conn net.Conn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%w: %T", ErrNoHandoff, conn)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %T: %v", ErrNoHandoff, conn, err)
	}
	rec := encodeRecord(typ, id)
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		if _, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
			serr = fmt.Errorf("%w: %T is not a socket: %v", ErrNoHandoff, conn, err)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		serr = writeRecord(s.c, rec[:], unix.UnixRights(int(fd)))
	})
	if cerr != nil {
		return fmt.Errorf("%w: %T: %v", ErrNoHandoff, conn, cerr)
	}
	return serr
}

// sendEnd tells the host that listener id stopped on its own.
func (s *fdSender) sendEnd(id uint64) error {
	rec := encodeRecord(recEnded, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return writeRecord(s.c, rec[:], nil)
}

func (s *fdSender) close() error { return s.c.Close() }

func writeRecord(c *net.UnixConn, rec, oob []byte) error {
	n, _, err := c.WriteMsgUnix(rec, oob, nil)
	if err != nil {
		return fmt.Errorf("transportplugin: descriptor channel: %w", err)
	}
	if n < len(rec) { // a unix stream socket takes 16 bytes at once in practice
		if _, err := c.Write(rec[n:]); err != nil {
			return fmt.Errorf("transportplugin: descriptor channel: %w", err)
		}
	}
	return nil
}

// fdReceiver reads records on the host's end of the descriptor channel.
type fdReceiver struct {
	c   *net.UnixConn
	oob []byte
}

func newFDReceiver(c *net.UnixConn) *fdReceiver {
	return &fdReceiver{c: c, oob: make([]byte, unix.CmsgSpace(4*maxFDsPerRecord))}
}

// maxFDsPerRecord is what a record may carry; more is a protocol error
// (the extra descriptors are closed).
const maxFDsPerRecord = 1

// next reads one record. conn is the connection whose descriptor came with
// it (nil for a record without one). io.EOF means the plugin closed the
// channel.
func (r *fdReceiver) next() (typ byte, id uint64, conn net.Conn, err error) {
	var rec [recordSize]byte
	got := 0
	var fds []int
	for got < recordSize {
		n, oobn, flags, _, err := r.c.ReadMsgUnix(rec[got:], r.oob)
		if oobn > 0 {
			fs, perr := parseRights(r.oob[:oobn])
			fds = append(fds, fs...)
			if perr != nil {
				closeFDs(fds)
				return 0, 0, nil, perr
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			closeFDs(fds)
			return 0, 0, nil, fmt.Errorf("transportplugin: descriptor channel: control data truncated")
		}
		if n == 0 && err == nil {
			err = io.EOF
		}
		if err != nil {
			closeFDs(fds)
			if got > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, nil, err
		}
		got += n
	}
	typ, id = rec[0], binary.BigEndian.Uint64(rec[4:12])
	if len(fds) > maxFDsPerRecord {
		closeFDs(fds)
		return 0, 0, nil, fmt.Errorf("transportplugin: descriptor channel: %d descriptors in one record", len(fds))
	}
	if len(fds) == 1 {
		f := os.NewFile(uintptr(fds[0]), "handoff")
		conn, err = net.FileConn(f)
		f.Close()
		if err != nil {
			return 0, 0, nil, fmt.Errorf("transportplugin: received descriptor: %w", err)
		}
	}
	return typ, id, conn, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("transportplugin: descriptor channel: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		fs, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, fs...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
