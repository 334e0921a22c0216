package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/plugins/metadata"
)

// The metadata plugin (plugins/metadata) on every node: its HTTP API on the
// node's API server (read-write on a master, read-only on a slave), its
// documents under DATA/config, and on a slave the syncer that pulls the
// master's metadata every --metadata-interval and right after the HA
// connection comes up.
func init() {
	extensionFactories = append(extensionFactories, func(role string, o *nodeOpts) (node.Extension, error) {
		return &metadataExtension{interval: o.MetadataInterval}, nil
	})
}

type metadataExtension struct {
	interval time.Duration // slave; 0 means metadata.DefaultSyncInterval
	store    metadataStore // builtin *metadata.Store, or an external plugin (plugins_metadata.go)
	syncer   *metadata.Syncer
}

func (m *metadataExtension) Name() string { return "metadata" }

func (m *metadataExtension) Start(env node.ExtensionEnv) error {
	slave := env.Role == core.Slave
	st, err := openMetadataStore(metadata.ConfigDir(env.DataDir), metadata.Options{
		Logger:         env.Logger,
		CreateDefaults: !slave,
	})
	if err != nil {
		return err
	}
	h, err := metadata.NewHandler(metadata.HandlerConfig{Store: st, ReadOnly: slave, Logger: env.Logger})
	if err != nil {
		st.Close()
		return err
	}
	env.API.Handle(metadata.APIPath, "metadata", h)
	env.API.Handle(metadata.APIPath+"/", "metadata", h)
	m.store = st
	if !slave {
		return nil
	}
	if env.MasterAPI == "" {
		env.Logger.Warn("no master API address (--master-api); metadata is not synchronised")
		return nil
	}
	src, err := metadata.NewHTTPSource(metadata.HTTPSourceConfig{BaseURL: env.MasterAPI, Client: env.MasterAPIClient})
	if err != nil {
		return fmt.Errorf("--master-api: %w", err)
	}
	m.syncer, err = metadata.NewSyncer(metadata.SyncerConfig{
		Master:     src,
		Local:      st,
		Interval:   m.interval,
		Logger:     env.Logger,
		Registerer: env.Registerer,
	})
	if err != nil {
		return err
	}
	if err := m.syncer.Start(); err != nil {
		return err
	}
	env.OnMasterConnect(m.syncer.Trigger)
	return nil
}

func (m *metadataExtension) Close() error {
	var errs []error
	if m.syncer != nil {
		errs = append(errs, m.syncer.Close())
	}
	if m.store != nil {
		errs = append(errs, m.store.Close())
	}
	return errors.Join(errs...)
}
