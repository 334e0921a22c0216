//go:build !linux

package core

import "github.com/replicatorhq/replicator/transport"

// newSocketVec: the direct socket path is Linux-only; elsewhere the slave
// reads through a FrameReader.
func newSocketVec(ss *slaveSession) (transport.VectorReader, bool) { return nil, false }
