package main

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// The metadata plugin (plugins/metadata) on every node: its HTTP API on the
// node's API server (read-write on a master, read-only on a slave), its
// documents under DATA/config, and on a slave the syncer that pulls the
// master's metadata every --metadata-interval and right after the HA
// connection comes up. In autoswitch mode it follows runtime role changes
// (node.ExtensionEnv.OnRoleChange): a promoted node stops its syncer, takes
// writes and serves remoting when configured; a demoted one refuses writes,
// stops remoting and syncs from the new master (demote --master-api).
// pluginState.extensions (plugins.go) builds it for every node command.
func newMetadataExtension(role string, o *nodeOpts, open metadataOpener) (*metadataExtension, error) {
	rem, err := newRemotingWiring(role, o) // remoting.go
	if err != nil {
		return nil, err
	}
	return &metadataExtension{interval: o.MetadataInterval, maxDocs: o.limits.MetadataMaxDocs, maxTotal: o.limits.MetadataMaxTotal, rem: rem, open: open}, nil
}

type metadataExtension struct {
	interval time.Duration   // slave; 0 means metadata.DefaultSyncInterval
	maxDocs  int             // --metadata-max-documents (0: the default)
	maxTotal int64           // --metadata-max-total-size (0: the default)
	rem      *remotingWiring // remoting.go; nil: no remoting
	open     metadataOpener  // the builtin store, or the external plugin (plugins_metadata.go)

	env      node.ExtensionEnv
	store    meta.Store   // builtin *metadata.Store, or an external plugin (plugins_metadata.go)
	ro, rw   http.Handler // the read-only (slave) and read-write (master) API
	writable atomic.Bool  // the node is a master now: rw serves

	mu     sync.Mutex // serialises role changes and Close
	closed bool
	syncer *metadata.Syncer // slave; nil on a master or without a master address
}

func (m *metadataExtension) Name() string { return "metadata" }

// Start opens the store, mounts the API and starts the role's work: the
// remoting server on a master, the syncer on a slave. Runtime role changes
// (replicator promote/demote) switch between them (roleChanged).
func (m *metadataExtension) Start(env node.ExtensionEnv) error {
	slave := env.Role == core.Slave
	st, err := m.open(metadata.ConfigDir(env.DataDir), pluginhost.MetadataOptions{
		Logger:         env.Logger,
		CreateDefaults: !slave,
		MaxDocuments:   m.maxDocs,
		MaxTotalSize:   m.maxTotal,
		Registerer:     env.Registerer,
	})
	if err != nil {
		return err
	}
	if m.ro, err = metadata.NewHandler(metadata.HandlerConfig{Store: st, ReadOnly: true, Logger: env.Logger}); err == nil {
		m.rw, err = metadata.NewHandler(metadata.HandlerConfig{Store: st, Logger: env.Logger})
	}
	if err != nil {
		st.Close()
		return err
	}
	m.env, m.store = env, st
	m.writable.Store(!slave)
	env.API.Handle(metadata.APIPath, "metadata", m)
	env.API.Handle(metadata.APIPath+"/", "metadata", m)
	if !slave {
		if err := m.rem.serve(env, st); err != nil {
			st.Close()
			return err
		}
	} else if err := m.startSyncer(env.MasterAPI, ""); err != nil {
		st.Close()
		return err
	}
	if err := m.rem.startRegistrar(env, st); err != nil { // namesrv.go: --namesrv-addr
		m.rem.close()
		m.stopSyncer()
		st.Close()
		return err
	}
	env.OnMasterConnect(m.trigger)
	env.OnRoleChange(m.roleChanged)
	return nil
}

// ServeHTTP serves the metadata API of the node's current role: writes
// on a master, 403 to writes on a slave.
func (m *metadataExtension) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.writable.Load() {
		m.rw.ServeHTTP(w, r)
		return
	}
	m.ro.ServeHTTP(w, r)
}

// startSyncer starts the slave's syncer (m.mu held, or Start). haAddr is
// the new master's HA address after a demote ("" at start: the configured
// sources): a remoting source is derived from it, an HTTP one needs
// masterAPI; without either, metadata stays unsynchronised with one WARN.
func (m *metadataExtension) startSyncer(masterAPI, haAddr string) error {
	env := m.env
	src, local, err := m.rem.source(m.store, haAddr)
	if err != nil {
		return err
	}
	if src == nil {
		if masterAPI == "" {
			if haAddr == "" {
				env.Logger.Warn("no master API address (--master-api); metadata is not synchronised")
			} else {
				env.Logger.Warn("demoted without the new master's API address (replicator demote --master-api, POST /v1/role \"master_api\"); metadata is not synchronised",
					"master", haAddr)
			}
			return nil
		}
		if src, err = metadata.NewHTTPSource(metadata.HTTPSourceConfig{BaseURL: masterAPI, Client: env.MasterAPIClient}); err != nil {
			return fmt.Errorf("--master-api: %w", err)
		}
	}
	sy, err := metadata.NewSyncer(metadata.SyncerConfig{
		Master:     src,
		Local:      local,
		Interval:   m.interval,
		Logger:     env.Logger,
		Registerer: env.Registerer,
	})
	if err != nil {
		return err
	}
	if err := sy.Start(); err != nil {
		return err
	}
	m.syncer = sy
	return nil
}

// trigger runs a sync round now (OnMasterConnect) when a syncer runs.
func (m *metadataExtension) trigger() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.syncer != nil {
		m.syncer.Trigger()
	}
}

// stopSyncer stops the syncer (m.mu held).
func (m *metadataExtension) stopSyncer() error {
	if m.syncer == nil {
		return nil
	}
	err := m.syncer.Close()
	m.syncer = nil
	return err
}

// roleChanged follows a runtime role change (node.ExtensionEnv.OnRoleChange):
// a new master stops its syncer, takes writes and serves remoting (when
// configured); a new slave refuses writes, stops serving remoting and syncs
// from its new master.
func (m *metadataExtension) roleChanged(rc node.RoleChange) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	log := m.env.Logger.Named("metadata")
	if rc.Role != core.Slave {
		if err := m.stopSyncer(); err != nil {
			log.Error("stopping the metadata syncer failed", "error", err)
		}
		m.writable.Store(true)
		if err := m.rem.serve(m.env, m.store); err != nil {
			log.Error("serving RocketMQ remoting after the promote failed", "error", err)
		}
		log.Info("promoted: metadata writes accepted, sync stopped", "remoting", m.rem.serving())
		return
	}
	m.writable.Store(false)
	if err := m.rem.close(); err != nil {
		log.Error("stopping the remoting server failed", "error", err)
	}
	if err := m.stopSyncer(); err != nil {
		log.Error("stopping the metadata syncer failed", "error", err)
	}
	if err := m.startSyncer(rc.MasterAPI, rc.MasterHA); err != nil {
		log.Error("starting the metadata syncer after the demote failed; metadata is not synchronised", "master", rc.MasterHA, "master_api", rc.MasterAPI, "error", err)
		return
	}
	log.Info("demoted: metadata writes refused (403)", "master", rc.MasterHA, "master_api", rc.MasterAPI, "syncing", m.syncer != nil)
}

func (m *metadataExtension) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	errs := []error{m.rem.stopRegistrar(), m.rem.close(), m.stopSyncer()}
	if m.store != nil {
		errs = append(errs, m.store.Close())
	}
	return errors.Join(errs...)
}
