package main

import (
	"fmt"
	"sync/atomic"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
)

// The metadata plugin is selected by name like the others: the builtin is
// "files" (plugins/metadata); an external replicator-metadata-files in
// --plugins DIR overrides it, and the node's metadata documents then live in
// that plugin process (one per node, started when the node starts). Both are
// a meta.Store with the same sentinel errors: nothing converts between them.

// metadataPluginName is the metadata plugin a node uses.
const metadataPluginName = "files"

// activePlugins is the plugin host of the running node, for the metadata
// extension (extensions are built before the node and do not see env).
var activePlugins atomic.Pointer[pluginState]

// openMetadataStore opens the external metadata plugin when one was loaded,
// else the builtin store.
func openMetadataStore(dir string, opts metadata.Options) (meta.Store, error) {
	if ps := activePlugins.Load(); ps != nil {
		st, ok, err := ps.host.OpenMetadata(metadataPluginName, metaplugin.OpenRequest{Dir: dir, CreateDefaults: opts.CreateDefaults})
		if ok {
			if err != nil {
				return nil, fmt.Errorf("metadata plugin %q: %w", metadataPluginName, err)
			}
			if opts.Logger != nil {
				opts.Logger.Info("metadata documents are served by the external plugin", "name", metadataPluginName)
			}
			return st, nil
		}
	}
	st, err := metadata.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return st, nil
}
