package storeplugin

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/replicatorhq/replicator/sdk/internal/shmring"
)

// ringSetupWait bounds the setup message's write and read.
const ringSetupWait = 5 * time.Second

// ringSetupSize is the setup message: flags (u32, the machine's byte
// order); bit 0: a ring's memfd rides along (SCM_RIGHTS).
const ringSetupSize = 4

// sendRingSetup creates the ring (size bytes of data) and sends the setup
// message on the host's end of an append side channel, with the ring's
// memfd when one could be made (else without: the channel runs without a
// ring, and so does the returned nil).
func (c *Client) sendRingSetup(uc *net.UnixConn, size int) (*shmring.Ring, error) {
	r, f, err := shmring.Create(size)
	var oob []byte
	var msg [ringSetupSize]byte
	if err != nil {
		c.log.Warn("no shared-memory append ring; queued appends go on the side channel", "error", err)
		r = nil
	} else {
		defer f.Close()
		oob = syscall.UnixRights(int(f.Fd()))
		binary.NativeEndian.PutUint32(msg[:], 1)
	}
	uc.SetWriteDeadline(time.Now().Add(ringSetupWait))
	defer uc.SetWriteDeadline(time.Time{})
	if _, _, err := uc.WriteMsgUnix(msg[:], oob, nil); err != nil {
		if r != nil {
			r.Close()
		}
		return nil, fmt.Errorf("storeplugin: append ring setup: %w", err)
	}
	return r, nil
}

// recvRingSetup reads the setup message on the plugin's end and maps the
// ring it carries (nil: the host sent none). Every descriptor received is
// closed or kept by the ring's mapping; anything but one descriptor with
// bit 0, or none without it, is refused.
func recvRingSetup(uc *net.UnixConn) (*shmring.Ring, error) {
	uc.SetReadDeadline(time.Now().Add(ringSetupWait))
	defer uc.SetReadDeadline(time.Time{})
	var msg [ringSetupSize]byte
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(msg[:], oob)
	if err != nil {
		return nil, fmt.Errorf("append ring setup: %w", err)
	}
	var fds []int
	if oobn > 0 {
		cms, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("append ring setup: %w", err)
		}
		for i := range cms {
			got, err := syscall.ParseUnixRights(&cms[i])
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	want := 0
	if n == ringSetupSize && binary.NativeEndian.Uint32(msg[:])&1 != 0 {
		want = 1
	}
	if n != ringSetupSize || flags&syscall.MSG_CTRUNC != 0 || len(fds) != want {
		closeAll()
		return nil, fmt.Errorf("append ring setup: %d bytes, %d descriptors (flags %#x): %w", n, len(fds), flags, shmring.ErrCorrupt)
	}
	if want == 0 {
		return nil, nil
	}
	f := os.NewFile(uintptr(fds[0]), "replicator-ring")
	defer f.Close()
	return shmring.Attach(f)
}
