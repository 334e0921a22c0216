package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"text/tabwriter"

	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// External plugins: `--plugins DIR` loads every plugin binary in DIR named
// replicator-<kind>-<name> (see sdk/plugin), each overriding the builtin of
// its name; DIR/SHA256SUMS, when present, pins them. A plugin that fails to
// load is logged with its path and does not stop the others. A plugin
// process that dies while the node runs is logged and counted in
// replicator_plugin_crashes_total. A metadata plugin is then restarted with
// backoff (replicator_plugin_restarts_total; after 5 quick crashes in a row
// the node gives up); a store or transport plugin shuts the node down
// cleanly (exit 1).

func pluginsCommand() *config.Command {
	return &config.Command{
		Name:     "plugins",
		Synopsis: "list the plugins: kind, name, version, builtin or external, path",
		Help: `List every plugin this binary can use: the builtin ones and, with --plugins DIR,
the external plugin binaries found in DIR (named replicator-<kind>-<name>; an
external plugin overrides the builtin of its name). Each external plugin is
started once to check its handshake, protocol version, checksum (DIR/SHA256SUMS)
and name. Plugins that fail are reported on stderr, and the exit status is 1.`,
	}
}

// pluginState is the one wiring path of the plugin kinds for a command
// that runs a node: the registry of store and transport plugins (builtins,
// overridden by --plugins DIR), the host of the external plugin processes
// (the metadata plugin's among them), and the extensions built over them.
// loadPlugins builds it, the node command passes it down: no package
// globals, no init().
type pluginState struct {
	reg     *pluginhost.Registry
	host    *pluginhost.Host
	crashed atomic.Bool
	mu      sync.Mutex
	cancel  context.CancelFunc // cancels the node's context; nil before watch
}

// loadPlugins creates the registry of the builtin plugins and the plugin
// host over it and, with --plugins, loads DIR into them. Load failures are
// logged (and returned for `plugins`); they do not stop the command.
func (e *env) loadPlugins() (*pluginState, error) {
	reg := pluginhost.Builtin()
	ps := &pluginState{reg: reg}
	h, err := pluginhost.NewHost(reg, pluginhost.HostOptions{
		AutoMTLS:       true,
		BuiltinVersion: versionString(),
		Logger:         e.log,
		OnCrash: func(en pluginhost.Entry, err error) {
			ps.crashed.Store(true)
			e.log.Error("an external plugin crashed; shutting down", "kind", en.Kind, "name", en.Name, "path", en.Path, "error", err)
			ps.mu.Lock()
			cancel := ps.cancel
			ps.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	ps.host = h
	dir := e.opts.global.Plugins
	if dir == "" {
		return ps, nil
	}
	if err := reg.SetDir(dir); err != nil {
		return nil, err
	}
	return ps, h.LoadDir(dir) // failures were logged, one per plugin
}

// runPlugins is `replicator plugins`.
func runPlugins(_ context.Context, e *env) int {
	ps, loadErr := e.loadPlugins()
	if ps == nil {
		return e.fail("plugins: %v", loadErr)
	}
	defer ps.host.Close()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tVERSION\tSOURCE\tPATH")
	for _, en := range ps.host.Entries() {
		src, path := "external", en.Path
		if en.Builtin {
			src, path = "builtin", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", en.Kind, en.Name, en.Version, src, path)
	}
	tw.Flush()
	if failed := ps.host.Failed(); len(failed) > 0 {
		for _, err := range failed {
			fmt.Fprintf(e.stderr, "replicator: plugins: %v\n", err)
		}
		return exitError
	}
	return exitOK
}

// extensions builds the node extensions of role ("master", "slave" or
// "node") over the loaded plugins: the metadata extension (metadata.go).
func (ps *pluginState) extensions(role string, o *nodeOpts) ([]node.Extension, error) {
	md, err := newMetadataExtension(role, o, ps.openMetadata)
	if err != nil {
		return nil, err
	}
	return []node.Extension{md}, nil
}

// watch returns ctx canceled when a plugin crashes, and a function that
// stops the plugin processes and says whether one crashed.
func (ps *pluginState) watch(ctx context.Context) (context.Context, func() (crashed bool)) {
	ctx, cancel := context.WithCancel(ctx)
	ps.mu.Lock()
	ps.cancel = cancel
	ps.mu.Unlock()
	if ps.crashed.Load() {
		cancel()
	}
	return ctx, func() bool {
		cancel()
		ps.host.Close()
		return ps.crashed.Load()
	}
}
