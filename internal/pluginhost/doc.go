// Package pluginhost is the host side of replicator's plugins: a Registry
// that maps a plugin name, per kind (store, transport), to a constructor,
// and a Host that loads external plugins into it.
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
// its own: Host logs it, counts it in replicator_plugin_crashes_total{kind,
// name} and calls HostOptions.OnCrash (the daemon then shuts down cleanly).
// An external store runs one plugin process per opened store; closing the
// store stops the process. The core cannot tell a builtin from an external
// plugin: both satisfy sdk/store.Store.
package pluginhost
