package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
)

// The metadata plugin is selected by name like the others: the builtin is
// "files" (plugins/metadata); an external replicator-metadata-files in
// --plugins DIR overrides it, and the node's metadata documents then live in
// that plugin process (one per node, started when the node starts).

// metadataPluginName is the metadata plugin a node uses.
const metadataPluginName = "files"

// metadataStore is what the metadata extension needs of its store.
type metadataStore interface {
	metadata.DocumentStore
	metadata.Sink
	Close() error
}

// activePlugins is the plugin host of the running node, for the metadata
// extension (extensions are built before the node and do not see env).
var activePlugins atomic.Pointer[pluginState]

// openMetadataStore opens the external metadata plugin when one was loaded,
// else the builtin store.
func openMetadataStore(dir string, opts metadata.Options) (metadataStore, error) {
	if ps := activePlugins.Load(); ps != nil {
		st, ok, err := ps.host.OpenMetadata(metadataPluginName, metaplugin.OpenRequest{Dir: dir, CreateDefaults: opts.CreateDefaults})
		if ok {
			if err != nil {
				return nil, fmt.Errorf("metadata plugin %q: %w", metadataPluginName, err)
			}
			if opts.Logger != nil {
				opts.Logger.Info("metadata documents are served by the external plugin", "name", metadataPluginName)
			}
			return &externalMetadata{st: st}, nil
		}
	}
	return metadata.Open(dir, opts)
}

// externalMetadata adapts an external metaplugin.Store to the metadata
// package's interfaces, mapping the SDK's sentinels back to its own.
type externalMetadata struct{ st metaplugin.Store }

func fromSDK(err error) error {
	for _, m := range []struct{ from, to error }{
		{metaplugin.ErrNotFound, metadata.ErrNotFound},
		{metaplugin.ErrInvalidName, metadata.ErrInvalidName},
		{metaplugin.ErrInvalidDocument, metadata.ErrInvalidDocument},
		{metaplugin.ErrTooLarge, metadata.ErrTooLarge},
		{metaplugin.ErrClosed, metadata.ErrClosed},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w: %w", m.to, err)
		}
	}
	return err
}

func versionFromSDK(v metaplugin.DataVersion) metadata.DataVersion {
	return metadata.DataVersion{StateVersion: v.StateVersion, Timestamp: v.Timestamp, Counter: v.Counter}
}

func docFromSDK(d metaplugin.Document) metadata.Document {
	return metadata.Document{Name: d.Name, Version: versionFromSDK(d.Version), Body: json.RawMessage(d.Body)}
}

func (m *externalMetadata) List(ctx context.Context) ([]metadata.Entry, error) {
	es, err := m.st.List(ctx)
	if err != nil {
		return nil, fromSDK(err)
	}
	out := make([]metadata.Entry, len(es))
	for i, e := range es {
		out[i] = metadata.Entry{Name: e.Name, Version: versionFromSDK(e.Version)}
	}
	return out, nil
}

func (m *externalMetadata) Get(ctx context.Context, name string) (metadata.Document, error) {
	d, err := m.st.Get(ctx, name)
	if err != nil {
		return metadata.Document{}, fromSDK(err)
	}
	return docFromSDK(d), nil
}

func (m *externalMetadata) Put(ctx context.Context, name string, body json.RawMessage) (metadata.Document, error) {
	d, err := m.st.Put(ctx, name, body)
	if err != nil {
		return metadata.Document{}, fromSDK(err)
	}
	return docFromSDK(d), nil
}

func (m *externalMetadata) Apply(ctx context.Context, docs []metadata.Document) error {
	in := make([]metaplugin.Document, len(docs))
	for i, d := range docs {
		in[i] = metaplugin.Document{Name: d.Name, Body: d.Body, Version: metaplugin.DataVersion{
			StateVersion: d.Version.StateVersion, Timestamp: d.Version.Timestamp, Counter: d.Version.Counter}}
	}
	return fromSDK(m.st.Apply(ctx, in))
}

func (m *externalMetadata) Close() error { return fromSDK(m.st.Close()) }
