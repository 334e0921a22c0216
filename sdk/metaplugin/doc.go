// Package metaplugin carries a metadata document store across the plugin
// boundary: the store of RocketMQ's named, versioned JSON documents
// (topics.json, subscriptionGroup.json, consumerOffset.json, ...) that a
// master serves and a slave syncs into. A plugin author implements Store
// with the plain types below and writes
//
//	func main() { metaplugin.Serve("mymeta", "1.0.0", open) }
//
// The host gets a *Client, itself a Store. Every call is one small unary
// gRPC call (a slave syncs every few seconds, far below the ~3k calls/s one
// plugin connection sustains). Errors cross through one table: ErrNotFound,
// ErrInvalidName, ErrInvalidDocument, ErrTooLarge and ErrClosed keep their
// identity; a plugin that is gone gives plugin.ErrPluginShutdown.
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
