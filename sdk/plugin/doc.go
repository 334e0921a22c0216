// Package plugin is the part of replicator's plugin SDK shared by every
// plugin kind: the go-plugin handshake, the protocol version, the Info
// service every plugin serves, the gRPC server factory and dial options, and
// ErrPluginShutdown.
//
// Plugin authors do not use this package directly: they call the one-line
// Serve of their kind (storeplugin.Serve, metaplugin.Serve), which calls Serve
// here. The host side (internal/pluginhost) uses Handshake, PluginSet and
// DialOptions.
//
// # Naming scheme
//
// A plugin binary is named replicator-<kind>-<name>[.exe], for example
// replicator-store-commitlog or replicator-metadata-files. <kind> is one of
// the Kind constants; <name> is [a-z0-9][a-z0-9_-]* and is the name the
// daemon's configuration selects. The binary's Describe answer must agree
// with its file name.
//
// # Process model
//
// The host starts the binary with the handshake cookie in its environment.
// The plugin writes nothing to stdout before Serve, logs JSON to stderr (the
// host relays each line into its own hclog under the plugin's name) and serves
// gRPC on a unix socket. On Linux the host sets a parent-death signal on the
// plugin's command; on every system Serve also runs a watchdog that exits the
// plugin when its parent process changes.
//
// # Plumbing
//
// What every kind shares but neither a plugin author nor the host programs
// against lives in sdk/internal: the side channel (a private unix socket
// next to the gRPC connection, sdk/internal/side), the sentinel error <->
// gRPC status tables (sdk/internal/rpcerr) and the gRPC codec and options
// (sdk/internal/grpcopt). This package exports only their entry points:
// NewGRPCServer, DialOptions and ErrPluginShutdown.
//
// # Crashes
//
// The host detects a plugin process that exits without being asked to,
// logs it and counts it (replicator_plugin_crashes_total{kind,name}). A
// metadata plugin is restarted with backoff
// (replicator_plugin_restarts_total); a store or transport plugin is not,
// and the node stops cleanly. See each kind's package for why.
package plugin
