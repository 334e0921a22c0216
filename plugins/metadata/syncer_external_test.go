package metadata_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/plugins/metadata/metadatatest"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// The syncer works with any Source and Sink: here both in memory. A local
// apply that fails fails the round and is retried by the next one.
func TestSyncerMemoryTwinApplyFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master, local := metadatatest.NewMemory(nil), metadatatest.NewMemory(nil)
	if _, err := master.Put(ctx, metadata.TopicsName, json.RawMessage(`{"topicConfigTable":{}}`)); err != nil {
		t.Fatal(err)
	}
	sy, err := metadata.NewSyncer(metadata.SyncerConfig{Master: master, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	diskFull := errors.New("disk full")
	local.FailApply = diskFull
	if r := sy.SyncOnce(ctx); !errors.Is(r.Err, diskFull) {
		t.Fatalf("round = %+v, want the apply error", r)
	}
	if st := sy.Status(); st.Healthy || st.Failures != 1 {
		t.Fatalf("status %+v", st)
	}
	local.FailApply = nil
	if r := sy.SyncOnce(ctx); r.Err != nil || len(r.Applied) != 1 {
		t.Fatalf("retry = %+v", r)
	}
	if r := sy.SyncOnce(ctx); r.Err != nil || len(r.Applied) != 0 || local.Applies != 1 {
		t.Fatalf("idle round = %+v, applies %d", r, local.Applies)
	}
	// Merging is per name: with no merges configured, consumer offsets are
	// replaced like any other document.
	if err := local.Apply(ctx, []meta.Document{{Name: metadata.ConsumerOffsetName, Body: json.RawMessage(`{"offsetTable":{"Only@slave":{"0":1}}}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := master.Put(ctx, metadata.ConsumerOffsetName, json.RawMessage(`{"offsetTable":{}}`)); err != nil {
		t.Fatal(err)
	}
	noMerge, err := metadata.NewSyncer(metadata.SyncerConfig{Master: master, Local: local, Merge: map[string]metadata.MergeFunc{}})
	if err != nil {
		t.Fatal(err)
	}
	if r := noMerge.SyncOnce(ctx); r.Err != nil {
		t.Fatal(r.Err)
	}
	if d, _ := local.Get(ctx, metadata.ConsumerOffsetName); string(d.Body) != `{"offsetTable":{}}` {
		t.Fatalf("consumer offsets %s", d.Body)
	}
}
