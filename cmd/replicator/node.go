package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// extensionFactories build the optional parts of a node (the metadata
// plugin); files of this package append to it in init. role is "master" or
// "slave"; o holds that role's options.
var extensionFactories []func(role string, o *nodeOpts) (node.Extension, error)

// builtinRegistry is the plugin registry: the builtin plugins.
func builtinRegistry() *pluginhost.Registry { return pluginhost.Builtin() }

// runNode runs a master or a slave until ctx is done (SIGINT, SIGTERM).
func runNode(ctx context.Context, e *env, role string) int {
	o := &e.opts.master
	if role == "slave" {
		o = &e.opts.slave
	}
	cfg, err := nodeConfig(e, role, o)
	if err != nil {
		return e.fail("%s: %v", role, err)
	}
	ctx, stopPlugins := e.plugins.watch(ctx) // plugins.go: a plugin crash cancels ctx
	n, err := node.New(cfg)
	if err != nil {
		stopPlugins()
		return e.fail("%s: %v", role, err)
	}
	err = n.Run(ctx)
	if stopPlugins() {
		e.log.Error("stopped: an external plugin crashed", "error", err)
		return exitError
	}
	if err != nil {
		e.log.Error("stopped with an error", "error", err)
		return exitError
	}
	e.log.Info("stopped")
	return exitOK
}

// nodeConfig turns the options of role into a node configuration.
func nodeConfig(e *env, role string, o *nodeOpts) (node.Config, error) {
	reg := builtinRegistry()
	ps, err := e.loadPlugins(reg) // plugins.go; load failures are logged, not fatal
	if ps == nil {
		return node.Config{}, err
	}
	e.plugins = ps
	cfg := node.Config{
		DataDir:         o.Data,
		Listen:          o.Listen,
		SegmentSize:     o.SegmentSize,
		StorePlugin:     o.Store,
		TransportPlugin: o.Transport,
		Registry:        reg,
		Logger:          e.log,
		Version:         versionString(),
	}
	switch role {
	case "master":
		cfg.Role = core.AsyncMaster
		if o.Replication == "sync" {
			cfg.Role = core.SyncMaster
		}
		cfg.HAListen = o.HAListen
		cfg.SlaveTimeout = o.SlaveTimeout
		cfg.SyncAcks = o.SyncAcks
		cfg.SyncFlush = o.Flush == "sync"
		cfg.MaxMessageSize = o.MaxMessageSize
		if o.MaxMessageSize > o.SegmentSize/2 {
			if _, set := e.sources["max-message-size"]; set && e.sources["max-message-size"] != config.SourceDefault {
				return cfg, fmt.Errorf("--max-message-size %s must be at most half of --segment-size %s",
					config.FormatSize(o.MaxMessageSize), config.FormatSize(o.SegmentSize))
			}
			// The default does not fit a small segment: take what fits.
			cfg.MaxMessageSize = o.SegmentSize / 2
		}
	case "slave":
		cfg.Role = core.Slave
		cfg.MasterHA = o.Master
		cfg.MasterAPI = o.MasterAPI
		cfg.ReconnectDelay = o.ReconnectDelay
		if cfg.MasterAPI == "" {
			cfg.MasterAPI = defaultMasterAPI(o.Master)
		}
	}
	for _, f := range extensionFactories {
		ext, err := f(role, o)
		if err != nil {
			return cfg, err
		}
		if ext != nil {
			cfg.Extensions = append(cfg.Extensions, ext)
		}
	}
	return cfg, nil
}

// defaultMasterAPI derives the master's API URL from its HA address with
// RocketMQ's convention: HA port = listen port + 1.
func defaultMasterAPI(haAddr string) string {
	host, port, err := net.SplitHostPort(haAddr)
	if err != nil {
		return ""
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 1 {
		return ""
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(p-1))
}
