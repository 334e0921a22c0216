package main

import (
	"fmt"

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

// metadataOpener opens the metadata store of a node's data directory.
type metadataOpener func(dir string, opts metadata.Options) (meta.Store, error)

// openMetadata opens the external metadata plugin when one was loaded into
// the host, else the builtin store.
func (ps *pluginState) openMetadata(dir string, opts metadata.Options) (meta.Store, error) {
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
	st, err = metadata.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return st, nil
}
