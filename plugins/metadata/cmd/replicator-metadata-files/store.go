package main

import (
	"context"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
)

// open opens the builtin store, a meta.Store itself, for the host.
func open(_ context.Context, req metaplugin.OpenRequest) (meta.Store, error) {
	st, err := metadata.Open(req.Dir, metadata.Options{Logger: req.Logger, CreateDefaults: req.CreateDefaults})
	if err != nil {
		return nil, err
	}
	return st, nil
}
