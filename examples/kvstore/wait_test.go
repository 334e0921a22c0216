package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusWaits: status --wait-connected returns once the follower
// follows the leader, --wait-caught-up once it has applied the leader's
// log (so a read right after sees the last write), and a wait that cannot
// come true exits 1 after --timeout, saying what it saw.
func TestStatusWaits(t *testing.T) {
	dir := t.TempDir()
	lh, lha, fh := freeAddr(t), freeAddr(t), freeAddr(t)
	start(t, "leader", "leader", "--data", filepath.Join(dir, "l"), "--http", lh, "--ha", lha, "--segment-size", "65536")
	start(t, "follower", "follower", "--data", filepath.Join(dir, "f"), "--http", fh, "--leader", lha, "--segment-size", "65536", "--reconnect-delay", "50ms")
	if code, out := cli(t, "status", "--addr", fh, "--wait-connected", "--timeout", "60s"); code != exitOK || !strings.Contains(out, `"connected":true`) {
		t.Fatalf("--wait-connected: %d %s", code, out)
	}
	for i := range 30 {
		put(t, lh, "k", fmt.Sprint(i))
	}
	if code, out := cli(t, "status", "--addr", fh, "--wait-caught-up", lh, "--timeout", "60s"); code != exitOK {
		t.Fatalf("--wait-caught-up: %d %s", code, out)
	}
	if st, ls := status(t, fh), status(t, lh); st.AppliedOffset < ls.MaxOffset {
		t.Fatalf("follower applied %d after --wait-caught-up, leader holds %d", st.AppliedOffset, ls.MaxOffset)
	}
	wantValue(t, fh, "k", "29")
	if code, out := cli(t, "status", "--addr", freeAddr(t), "--wait", "--timeout", "200ms"); code != exitError || !strings.Contains(out, "gave up") {
		t.Fatalf("--wait on nothing: %d %s", code, out)
	}
}
