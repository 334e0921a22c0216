package metaplugin

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/internal/rpcerr"
)

// TestPluginMetaErrorTable round-trips every sentinel through a gRPC status.
func TestPluginMetaErrorTable(t *testing.T) {
	for _, e := range errorTable {
		wrapped := fmt.Errorf("doc x: %w", e.Err)
		st := rpcerr.ToStatus(errorTable, wrapped)
		if s, _ := status.FromError(st); s.Code() != e.Code {
			t.Fatalf("%v: code %v, want %v", e.Err, s.Code(), e.Code)
		}
		back := rpcerr.FromStatus(errorTable, st)
		if !errors.Is(back, e.Err) || back.Error() != wrapped.Error() {
			t.Fatalf("%v came back as %v", e.Err, back)
		}
	}
}
