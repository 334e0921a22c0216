// Package metaplugin carries a metadata document store across the plugin
// boundary: the store of RocketMQ's named, versioned JSON documents
// (topics.json, subscriptionGroup.json, consumerOffset.json, ...) that a
// master serves and a slave syncs into. The model is package sdk/meta's,
// defined there once: a plugin author implements meta.Store (List, Get,
// Put, Apply, Close over meta.Document, meta.Entry, meta.DataVersion) and
// writes
//
//	func main() { metaplugin.Serve("mymeta", "1.0.0", open) }
//
// The host gets a *Client, itself a meta.Store. Every call is one small unary
// gRPC call (a slave syncs every few seconds, far below the ~3k calls/s one
// plugin connection sustains). Errors cross through one table:
// meta.ErrNotFound, meta.ErrInvalidName, meta.ErrInvalidDocument,
// meta.ErrTooLarge and meta.ErrClosed keep their identity; a plugin that is
// gone gives plugin.ErrPluginShutdown. The builtin store
// (plugins/metadata) returns the same sentinels, so a host sees one set of
// errors whichever store serves it.
//
// Crashes: the host keeps no state of a metadata plugin but its
// OpenRequest, so it restarts a plugin process that dies, with backoff (200
// ms, doubling up to 10 s), and opens it again with the same request;
// replicator_plugin_restarts_total{kind="metadata"} counts the restarts.
// Calls made while it is down fail with plugin.ErrPluginShutdown (a slave's
// syncer retries at its next tick). After 5 restarts in a row that did not
// stay up a minute, the host gives up and the node stops cleanly. A plugin
// author's part: Open must be able to run again on the same directory (the
// documents must be where the previous process left them, durably: Put and
// Apply return only once their write is complete).
package metaplugin
