package transportplugin

import (
	"encoding/binary"
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/replicatorhq/replicator/sdk/internal/rpcerr"
	"github.com/replicatorhq/replicator/sdk/plugin"
)

// Descriptor channel records (plugin -> host), 16 bytes each, big-endian;
// a record of type recDialed or recAccepted carries exactly one descriptor
// (SCM_RIGHTS) attached to its first byte:
//
//	 0      1             4                      12            16
//	+------+-------------+----------------------+-------------+
//	| type | reserved 0  | id              u64  | reserved 0  |
//	+------+-------------+----------------------+-------------+
const (
	recordSize = 16

	recDialed   byte = 1 // the connection of Dial request id
	recAccepted byte = 2 // a connection accepted by listener id
	recEnded    byte = 3 // listener id stopped on its own (no descriptor)
)

func encodeRecord(typ byte, id uint64) [recordSize]byte {
	var r [recordSize]byte
	r[0] = typ
	binary.BigEndian.PutUint64(r[4:12], id)
	return r
}

// ErrPluginShutdown is plugin.ErrPluginShutdown: calls on a Client whose
// plugin process is gone fail with it (connections already handed over keep
// working: they are the host's sockets).
var ErrPluginShutdown = plugin.ErrPluginShutdown

// ErrNoHandoff means a connection has no kernel socket the host could own:
// the plugin's net.Conn does not implement syscall.Conn (a *tls.Conn, an
// in-memory pipe, anything that keeps the stream's bytes or state in the
// plugin's memory). Such a transport cannot be an external plugin.
var ErrNoHandoff = errors.New("transportplugin: connection cannot be handed to the host")

// errNoFDSystem: this system cannot pass descriptors (not unix).
var errNoFDSystem = errors.New("transportplugin: passing descriptors needs a unix system")

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("transportplugin: closed")

// errorTable maps the sentinels to gRPC codes; context errors and
// Unavailable (plugin gone) are rpcerr.Decode's own.
var errorTable = []rpcerr.ErrorCode{
	{Err: ErrNoHandoff, Code: codes.FailedPrecondition, Reason: "NO_HANDOFF"},
	{Err: ErrClosed, Code: codes.Aborted, Reason: "CLOSED"},
	{Err: plugin.ErrPluginShutdown, Code: codes.Unavailable, Reason: "PLUGIN_SHUTDOWN"},
}

func toStatus(err error) error   { return rpcerr.ToStatus(errorTable, err) }
func fromStatus(err error) error { return rpcerr.FromStatus(errorTable, err) }
