// Command replicator-store-filestore is an example store plugin written
// against replicator's public SDK only: it serves the filestore package as
// the store plugin "filestore". Build it into the plugins directory and
// select it with --store filestore:
//
//	go build -o plugins/replicator-store-filestore ./examples/store-plugin
//	replicator --plugins plugins master --store filestore ...
package main

import (
	"context"

	"github.com/replicatorhq/replicator/examples/store-plugin/filestore"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

func main() {
	storeplugin.Serve("filestore", "0.1.0", func(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
		return filestore.Open(req.Dir, req.SegmentSize)
	})
}
