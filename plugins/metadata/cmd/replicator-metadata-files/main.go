// Command replicator-metadata-files serves the builtin metadata store
// (plugins/metadata: RocketMQ-named JSON documents with DataVersion, in
// DATA/config) as the external metadata plugin "files".
//
//	go build -o bin/plugins/replicator-metadata-files ./plugins/metadata/cmd/replicator-metadata-files
package main

import "github.com/replicatorhq/replicator/sdk/metaplugin"

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() { metaplugin.Serve("files", version, open) }
