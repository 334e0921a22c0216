// Command replicator-store-commitlog serves the builtin commit-log store
// (plugins/commitlog) as an external store plugin. It shares its segment
// files: the host maps them read-only and reads the log without a round
// trip; appends arrive in batches on the plugin's append stream.
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
