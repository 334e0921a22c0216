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
package metaplugin
