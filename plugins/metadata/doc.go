// Package metadata is replicator's default metadata plugin: RocketMQ's broker
// metadata (topic configs, subscription groups, consumer offsets, delay
// offsets, or any other named JSON document) kept as versioned JSON files,
// served over HTTP by the master, and pulled by a timer-driven syncer on the
// slave (RocketMQ's SlaveSynchronize; rocketmq-ha-spec.md section 8).
//
// # The plugin contract
//
// The model is package sdk/meta's, defined there once for every metadata
// store, source and plugin: meta.Document, meta.Entry, meta.DataVersion,
// the interfaces meta.Source (List, Get: where metadata comes from),
// meta.Sink (Apply: where a slave puts it), meta.Store (both, plus Put and
// Close: what a node serves, and what an external plugin implements) and
// meta.Deleter, and the sentinel errors meta.ErrNotFound, ErrInvalidName,
// ErrInvalidDocument, ErrTooLarge and ErrClosed. This package implements
// them: *Store is a meta.Store and a meta.Deleter, HTTPSource and
// RemotingSource are meta.Sources, Syncer copies a meta.Source into a
// LocalStore (meta.Source + meta.Sink). Other sources plug in the same way.
//
// Package metadatatest has the in-memory twin (Memory: a Source, Sink and
// Put without disk) and the conformance suite TestLocalStore, which *Store,
// Memory and any third-party LocalStore run.
//
// Document.Body is always a JSON object and never contains the
// "dataVersion" member: the version travels in Document.Version. A
// "dataVersion" member in a body handed to Put or Apply is dropped.
//
// # Files on disk (Store)
//
// Open(dir, opts) serves the documents in dir, which is DATA/config (use
// ConfigDir(dataDir)). A document's name is its file name: "topics.json" is
// DATA/config/topics.json. The defaults are RocketMQ's topics.json,
// subscriptionGroup.json, consumerOffset.json and delayOffset.json
// (Options.CreateDefaults creates them empty when absent); any other valid
// name is allowed.
//
// The DataVersion is embedded in the file as RocketMQ does it, as the first
// member "dataVersion" of the top-level JSON object, followed by the body's
// members in their original order and bytes:
//
//	{"dataVersion":{"stateVersion":0,"timestamp":1764576000000,"counter":3},"topicConfigTable":{...}}
//
// We embed rather than wrap or keep a sidecar because the files then stay
// byte-compatible with a RocketMQ broker's own config files: a real broker
// can read ours, and Open reads a real broker's (4.x consumerOffset.json has
// no dataVersion: its version is the zero DataVersion). The decoder is
// lenient in one way only, as RocketMQ's files need: fastjson writes integer
// map keys without quotes ({0:12,1:7}); such keys are quoted on load. The
// HTTP and GET encodings are the same bytes as the file.
//
// Every write is atomic and durable: the new content goes to NAME.tmp, which
// is fsynced; the previous version is kept as NAME.bak (written the same
// way); NAME.tmp is renamed over NAME; the directory is fsynced. When NAME is
// unreadable or does not decode, Open falls back to NAME.bak (and logs at
// Warn); the next write then keeps that good NAME.bak rather than backing
// up the unreadable file. With neither readable, Open fails with
// ErrInvalidDocument, unless the file does not even start with '{' (no
// document at all, such as RocketMQ's binary timercheck): that one is
// skipped with a Warn. Apply of several documents is atomic across a crash too: all
// temporary files are written and fsynced first, then a journal
// (.apply.journal, itself written atomically) lists them, then they are
// renamed into place and the journal removed. Open rolls a complete journal
// forward and deletes stray temporary files without one.
//
// Names: 1 to 251 bytes (NAME.bak must fit the 255-byte file-name limit),
// valid UTF-8, no '/' or '\\', no "..", no control characters, not starting
// with '.', and not ending in ".tmp" or ".bak" (those are the store's own
// files). Bodies: a JSON object of at most Options.MaxDocumentSize bytes
// (default DefaultMaxDocumentSize, 16 MiB). The store as a whole is bounded:
// at most Options.MaxDocuments documents (DefaultMaxDocuments, 256) whose
// bodies sum to at most Options.MaxTotalSize bytes (DefaultMaxTotalSize,
// 64 MiB); a Put or Apply that would pass a bound fails with ErrLimit and
// changes nothing (a write that adds neither documents nor bytes always
// passes, so a store opened over its bounds can shrink). Delete removes a
// document: NAME.bak first, then NAME, then the directory is fsynced, so a
// crash in between leaves the current document, never an older backup.
// With Options.Registerer the store exports replicator_metadata_documents,
// replicator_metadata_stored_bytes and
// replicator_metadata_refused_writes_total{reason="documents"|"total_size"}.
// Stores on one registry share these series (internal/promreg's policy):
// refusals sum, and the two gauges are sums over the stores open there.
//
// Store methods are safe for concurrent use. One mutex serialises
// everything: reads are served from memory but wait for a write in
// progress (a few fsyncs; metadata writes are rare). The store does not notice files
// changed behind its back (as RocketMQ, which loads them once).
//
// # HTTP API (NewHandler)
//
// The master opens the store with Open(ConfigDir(dataDir),
// Options{CreateDefaults: true}); a slave opens the same way (defaults
// optional: the syncer replaces them). Store.Close is idempotent and has
// nothing to flush.
//
// NewHandler(HandlerConfig{Store: st, ReadOnly: isSlave}) returns an
// http.Handler for these routes (mount it at "/" or at "/v1/metadata" and
// "/v1/metadata/" of the daemon's ServeMux):
//
//	GET /v1/metadata         200 {"documents":[{"name":"topics.json","dataVersion":{...}},...]}
//	GET /v1/metadata/{name}  200 the document, exactly as in the file (dataVersion first)
//	                         404 {"error":"..."} when absent
//	PUT /v1/metadata/{name}  body: a JSON object (a "dataVersion" member is ignored)
//	                         200 {"name":"topics.json","dataVersion":{...}} with the bumped version
//	                         400 bad name, body not JSON or not an object
//	                         413 body over MaxDocumentSize (read through http.MaxBytesReader)
//	                         507 the store's MaxDocuments or MaxTotalSize would be passed
//	                         403 in read-only mode (slaves)
//	DELETE /v1/metadata/{name}
//	                         200 {"name":"x.json","deleted":true}; 404 when absent
//	                         403 in read-only mode; 501 when the store is not a Deleter
//
// Every error answer is {"error":"<message>"} with Content-Type
// application/json, and leaves nothing on disk changed. The handler checks
// the name in the raw (escaped) path before routing, so "a%2Fb", "%2E%2E"
// and ".." get a 400 from it; a ServeMux in front of it (the daemon's)
// may answer a path with "." or ".." segments with its own redirect first.
// Other methods get 405 with an Allow header and a JSON message.
//
// # Slave syncer (NewSyncer)
//
// A Syncer copies a master Source into a local Source+Sink:
//
//	master, _ := metadata.NewHTTPSource(metadata.HTTPSourceConfig{BaseURL: "http://10.0.0.1:8080"})
//	syncer, _ := metadata.NewSyncer(metadata.SyncerConfig{
//		Master: master, Local: st, Interval: 10 * time.Second,
//		Logger: logger, Registerer: reg,
//	})
//	syncer.Start()         // syncs at once, then every Interval
//	syncer.Trigger()       // e.g. right after the HA connection comes up
//	syncer.Status()        // Healthy, LastSuccess, LastError, Rounds, Failures
//	defer syncer.Close()   // cancels and waits for the goroutine
//
// Local is a LocalStore (Source + Sink; *Store). SyncOnce(ctx) runs one
// round synchronously; SyncerConfig.AfterRound observes every round.
//
// Each round lists the master, fetches only the documents whose DataVersion
// differs from the local one (Equal), and applies them all through the Sink
// in one atomic Apply, adopting the master's version (no local bump, so an
// unchanged master is never re-fetched). Documents named in
// SyncerConfig.Merge are merged instead of replaced; by default
// consumerOffset.json uses MergeConsumerOffsets, RocketMQ's rule: the
// master's offsetTable entries (key "topic@group", value {queueId: offset})
// are put into the local table (a put-all per key, as RocketMQ's
// ConcurrentMap.putAll), so entries are always taken and never deleted.
// When Local is also a Deleter (*Store is), local documents the master no
// longer lists are deleted first, in the same round (SyncResult.Deleted),
// so a document deleted on the master disappears from its slaves and the
// local bounds count what the master has.
//
// A round that fails (master unreachable, an answer malformed or over its
// size bound, the local apply failing) changes nothing locally and is
// retried at the next tick. The syncer logs once per change of state: Warn
// when it goes from healthy (or starting) to failing, Info when it recovers;
// repeated failures log at Debug only.
//
// Metrics (on SyncerConfig.Registerer; nil registers nothing):
//
//	replicator_metadata_last_sync_timestamp_seconds  gauge, end of the last successful round
//	replicator_metadata_sync_failures_total          counter, failed rounds
//	replicator_metadata_documents_applied_total      counter, documents applied locally
//	replicator_metadata_documents_deleted_total      counter, local documents deleted (gone on the master)
//	replicator_metadata_sync_bytes_total             counter, document bytes fetched from the master
//
// HTTPSource bounds every answer before reading it: the list to
// HTTPSourceConfig.MaxListSize (default 4 MiB), a document to
// MaxDocumentSize plus 1 KiB for the embedded dataVersion.
//
// # Errors
//
// Sentinels, wrapped with context; check them with errors.Is: ErrNotFound,
// ErrInvalidName, ErrInvalidDocument, ErrTooLarge, ErrLimit (a store bound),
// ErrBadResponse (a malformed answer from a master), ErrClosed. A Store whose renames fail
// half-way (the directory became unwritable) refuses further calls until
// it is opened again, which recovers from the journal.
//
// # Wiring (cmd/replicator/metadata.go)
//
// Every node opens the store in DATA/config and mounts the handler on its
// API server (read-only on a slave); a slave also runs a Syncer against
// --master-api every --metadata-interval and triggers it each time its HA
// connection to the master comes up.
//
// # Locks
//
// Store has one mutex. Syncer has two: roundMu (held for a whole round, so
// rounds never overlap) is taken before mu (status and lifecycle); mu is
// never held while calling the Source, the Sink or AfterRound.
package metadata
