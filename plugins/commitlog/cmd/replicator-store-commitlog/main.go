// Command replicator-store-commitlog serves the builtin commit-log store
// (plugins/commitlog) as an external store plugin: the host reaches it only
// through the sdk/store.Store interface (appends in batches on the append
// stream, a slave's frames through the shared-memory append ring on Linux,
// reads from what the acks bring back or from ReadStream), never through
// its files.
//
//	go build -o bin/plugins/replicator-store-commitlog ./plugins/commitlog/cmd/replicator-store-commitlog
//
// OpenRequest.Options understood: sync_flush (bool), max_message_size
// (bytes), preallocate (bool).
package main

import (
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() { storeplugin.Serve("commitlog", version, open) }
