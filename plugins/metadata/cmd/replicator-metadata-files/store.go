package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
)

// files adapts *metadata.Store to metaplugin.Store.
type files struct{ st *metadata.Store }

func open(_ context.Context, req metaplugin.OpenRequest) (metaplugin.Store, error) {
	st, err := metadata.Open(req.Dir, metadata.Options{Logger: req.Logger, CreateDefaults: req.CreateDefaults})
	if err != nil {
		return nil, toSDK(err)
	}
	return files{st}, nil
}

// toSDK marks err with the SDK sentinel matching its metadata sentinel.
func toSDK(err error) error {
	for _, m := range []struct{ from, to error }{
		{metadata.ErrNotFound, metaplugin.ErrNotFound},
		{metadata.ErrInvalidName, metaplugin.ErrInvalidName},
		{metadata.ErrInvalidDocument, metaplugin.ErrInvalidDocument},
		{metadata.ErrTooLarge, metaplugin.ErrTooLarge},
		{metadata.ErrClosed, metaplugin.ErrClosed},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w: %w", m.to, err)
		}
	}
	return err
}

func toVersion(v metadata.DataVersion) metaplugin.DataVersion {
	return metaplugin.DataVersion{StateVersion: v.StateVersion, Timestamp: v.Timestamp, Counter: v.Counter}
}

func doc(d metadata.Document) metaplugin.Document {
	return metaplugin.Document{Name: d.Name, Version: toVersion(d.Version), Body: d.Body}
}

func (f files) List(ctx context.Context) ([]metaplugin.Entry, error) {
	es, err := f.st.List(ctx)
	if err != nil {
		return nil, toSDK(err)
	}
	out := make([]metaplugin.Entry, len(es))
	for i, e := range es {
		out[i] = metaplugin.Entry{Name: e.Name, Version: toVersion(e.Version)}
	}
	return out, nil
}

func (f files) Get(ctx context.Context, name string) (metaplugin.Document, error) {
	d, err := f.st.Get(ctx, name)
	if err != nil {
		return metaplugin.Document{}, toSDK(err)
	}
	return doc(d), nil
}

func (f files) Put(ctx context.Context, name string, body []byte) (metaplugin.Document, error) {
	d, err := f.st.Put(ctx, name, json.RawMessage(body))
	if err != nil {
		return metaplugin.Document{}, toSDK(err)
	}
	return doc(d), nil
}

func (f files) Apply(ctx context.Context, docs []metaplugin.Document) error {
	in := make([]metadata.Document, len(docs))
	for i, d := range docs {
		in[i] = metadata.Document{Name: d.Name, Body: d.Body, Version: metadata.DataVersion{
			StateVersion: d.Version.StateVersion, Timestamp: d.Version.Timestamp, Counter: d.Version.Counter}}
	}
	return toSDK(f.st.Apply(ctx, in))
}

func (f files) Close() error { return toSDK(f.st.Close()) }
