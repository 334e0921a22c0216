//go:build !unix

package transportplugin

import "net"

// fdSupported reports whether this system can pass descriptors: not here.
const fdSupported = false

type fdSender struct{ c *net.UnixConn }

func (s *fdSender) send(byte, uint64, net.Conn) error { return errNoFDSystem }
func (s *fdSender) sendEnd(uint64) error              { return errNoFDSystem }
func (s *fdSender) close() error                      { return s.c.Close() }

type fdReceiver struct{ c *net.UnixConn }

func newFDReceiver(c *net.UnixConn) *fdReceiver { return &fdReceiver{c: c} }

func (r *fdReceiver) next() (byte, uint64, net.Conn, error) { return 0, 0, nil, errNoFDSystem }
