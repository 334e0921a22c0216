package pluginhost

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestQuietExitDemotesCleanExits: go-plugin's INFO line for a process that
// exited cleanly is a DEBUG line; other lines keep their level.
func TestQuietExitDemotesCleanExits(t *testing.T) {
	var b bytes.Buffer
	l := quietExit{hclog.New(&hclog.LoggerOptions{Output: &b, Level: hclog.Info})}
	l.Info("plugin process exited", "plugin", "/p/replicator-store-x", "id", 42)
	if b.Len() != 0 {
		t.Fatalf("a clean exit logged at INFO: %s", b.String())
	}
	l.Info("something else")
	l.Error("plugin process exited", "error", "exit status 2")
	if out := b.String(); !strings.Contains(out, "[INFO]  something else") || !strings.Contains(out, "[ERROR] plugin process exited") {
		t.Fatalf("other lines changed:\n%s", out)
	}
}
