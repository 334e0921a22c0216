package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

// open is the plugin's storeplugin.Opener.
func open(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
	o := commitlog.DefaultOptions()
	if req.SegmentSize > 0 {
		o.SegmentSize = req.SegmentSize
	}
	o.Logger = req.Logger
	if v, ok := req.Options["sync_flush"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("commitlog plugin: sync_flush=%q: %w", v, err)
		}
		if b {
			o.FlushMode = commitlog.FlushSync
		}
	}
	if v, ok := req.Options["max_message_size"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("commitlog plugin: max_message_size=%q: %w", v, err)
		}
		if n > 0 {
			o.MaxMessageSize = int(n)
		}
	}
	if v, ok := req.Options["preallocate"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("commitlog plugin: preallocate=%q: %w", v, err)
		}
		o.Preallocate = b
	}
	return commitlog.Open(req.Dir, o)
}
