package main

import (
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// The metadata plugin is selected by name like the others, through the
// plugin registry: the builtin is "files" (plugins/metadata); an external
// replicator-metadata-files in --plugins DIR overrides it, and the node's
// metadata documents then live in that plugin process (one per node, started
// when the node starts). Both are a meta.Store with the same sentinel
// errors: nothing converts between them.

// metadataPluginName is the metadata plugin a node uses.
const metadataPluginName = "files"

// metadataOpener opens the metadata store of a node's data directory.
type metadataOpener = pluginhost.MetadataFactory

// openMetadata opens the node's metadata plugin from the registry.
func (ps *pluginState) openMetadata(dir string, opts pluginhost.MetadataOptions) (meta.Store, error) {
	f, err := ps.reg.Metadata(metadataPluginName)
	if err != nil {
		return nil, err
	}
	return f(dir, opts)
}
