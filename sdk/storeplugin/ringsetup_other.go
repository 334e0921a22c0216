//go:build !linux

package storeplugin

import (
	"net"

	"github.com/replicatorhq/replicator/sdk/internal/shmring"
)

// sendRingSetup is never called where the ring is not supported (the
// host does not ask for it).
func (c *Client) sendRingSetup(*net.UnixConn, int) (*shmring.Ring, error) {
	return nil, shmring.ErrUnsupported
}

// recvRingSetup: the plugin refuses the ring before dialing here.
func recvRingSetup(*net.UnixConn) (*shmring.Ring, error) { return nil, shmring.ErrUnsupported }
