//go:build !linux

package transport

import "net"

// newFDReader: vectored socket reads are Linux-only; elsewhere a
// ConnReader reads through net.Conn.
func newFDReader(conn net.Conn) fdReader { return nil }
