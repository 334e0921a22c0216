package embedetcd

import (
	"testing"

	"go.uber.org/goleak"
)

// Multi-member clusters are tested with real processes (cmd/replicator's
// TestControllerThreeMembers): members of one cluster inside one process
// leave etcd's peer HTTP keep-alive connections open after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
