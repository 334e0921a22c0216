// Package pluginhost is the host side of replicator's plugins: a Registry
// that maps a plugin name, per kind (store, transport), to a constructor,
// and a Host that loads external plugins (store, metadata, transport) into it.
//
// Builtin plugins (linked into the binary, as Vault's builtin plugins) are
// registered by Builtin. Host.LoadDir(dir) (the daemon's --plugins DIR)
// scans dir for executables named replicator-<kind>-<name> (see sdk/plugin;
// other files are skipped), starts each one once to check it — go-plugin
// handshake cookie, protocol version (VersionedPlugins), optional SHA-256
// pin (go-plugin SecureConfig, from DIR/SHA256SUMS or HostOptions.Checksums),
// and its Describe answer against its file name — and registers the good
// ones under their names, overriding builtins. A bad file is reported with
// its path (wrapping ErrIncompatible) and does not stop the others.
//
// Process lifecycle (Launch, Process): gRPC only, AutoMTLS when asked, the
// plugin's stderr relayed into the host's hclog under the binary's name, a
// parent-death signal (SIGKILL, Linux) on the plugin's command so that no
// plugin outlives a host killed with SIGKILL (the SDK's parent watchdog
// covers other systems), and a monitor that reports a process that exits on
// its own: Host logs it and counts it in replicator_plugin_crashes_total{kind,
// name}. A metadata plugin (stateless for the host: only its OpenRequest)
// is then restarted with backoff (HostOptions.RestartBackoff, doubling up to
// 10s) and opened again, counted in replicator_plugin_restarts_total; after
// HostOptions.MaxRestarts restarts in a row that did not stay up
// RestartStableAfter, or for a store or transport plugin at once, Host calls
// HostOptions.OnCrash (the daemon then shuts down cleanly). A store is not
// restarted because what it acknowledged may not be durable and the host's
// mappings and bounds describe the dead process; a transport is not because
// it held the master's listening socket and its connection policy
// (connections it handed over stay the host's and keep working until the
// node stops).
//
// An external store, metadata store or transport runs one plugin process
// per opened instance; closing it stops the process. An external transport
// is control only (sdk/transportplugin): the plugin listens, accepts and
// dials, the host receives the connected sockets as descriptors and moves
// every byte itself. The core cannot tell a builtin from an external
// plugin: both satisfy sdk/store.Store and transport.Transport.
package pluginhost
