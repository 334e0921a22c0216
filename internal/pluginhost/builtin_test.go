package pluginhost_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/plugins/metadata"
)

// TestBuiltinMetadata: the builtin metadata store "files" is wired like
// the other kinds, through the registry: listed, opened by name (with the
// defaults a master creates), and an unknown name is ErrUnknownPlugin.
func TestBuiltinMetadata(t *testing.T) {
	reg := pluginhost.Builtin()
	if got := reg.MetadataNames(); !slices.Equal(got, []string{"files"}) {
		t.Fatalf("metadata plugins %v, want [files]", got)
	}
	open, err := reg.Metadata("files")
	if err != nil {
		t.Fatal(err)
	}
	st, err := open(t.TempDir(), pluginhost.MetadataOptions{CreateDefaults: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	entries, err := st.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(metadata.DefaultDocuments) {
		t.Fatalf("a new store with defaults lists %d documents, want %d", len(entries), len(metadata.DefaultDocuments))
	}
	if _, err := reg.Metadata("nope"); !errors.Is(err, pluginhost.ErrUnknownPlugin) {
		t.Fatalf("unknown metadata plugin: %v", err)
	}
}
