// Package meta is the metadata kind's contract, as package store is the
// store kind's: the model of RocketMQ's broker metadata (named JSON
// documents such as topics.json, subscriptionGroup.json,
// consumerOffset.json and delayOffset.json, each with a DataVersion), the
// interfaces a metadata store implements, and the errors they return.
//
// The builtin store (plugins/metadata), its HTTP and remoting sources, the
// slave's syncer, an external plugin (sdk/metaplugin) and the host all use
// these types; nothing converts between copies of them.
//
//	type Document struct { Name string; Version DataVersion; Body json.RawMessage }
//	type Entry    struct { Name string; Version DataVersion }            // JSON: name, dataVersion
//	type DataVersion struct { StateVersion, Timestamp, Counter int64 }   // JSON: stateVersion, timestamp, counter
//
//	Source  List, Get                    where metadata comes from (a store, a master over HTTP or remoting)
//	Sink    Apply                        where a slave puts what it copied (all or nothing)
//	Store   Source + Sink + Put + Close  a store a node serves and syncs into; what a plugin implements
//	Deleter Delete                       optional beside Store (the builtin store has it; the plugin protocol has no delete)
//
// DataVersion has RocketMQ's meaning: Next(now) sets Timestamp to now in
// milliseconds and increments Counter; Equal compares all three fields;
// Compare orders by StateVersion, then Counter, then Timestamp.
//
// Document.Body is always a JSON object without a "dataVersion" member:
// the version travels in Document.Version.
//
// Errors are the sentinels below, wrapped with context; check them with
// errors.Is. They keep their identity across the plugin boundary
// (sdk/metaplugin maps each to a gRPC code and back).
package meta
