// Package node assembles one replicator process: it opens the store and the
// transport through the plugin registry, starts the replication core as a
// master or a slave, serves the HTTP API and the metrics on --listen, runs
// extensions (the metadata plugin), and shuts all of it down in order.
//
// Start order: lock DATA/lock, listen on the API address, register metrics
// (Go runtime, process, build info, store offsets) on a fresh registry, open
// the store in DATA (the builtin commitlog keeps its segments in
// DATA/commitlog and its checkpoint in DATA/commitlog.checkpoint), start core (master: HA listener; slave: HA
// client), start extensions, serve. Shutdown order (Run's ctx done, e.g.
// SIGTERM): /readyz answers 503 and long polls end, the API stops accepting
// and waits for in-flight requests (a sync put waits at most the slave
// timeout; the whole wait is bounded by the slave timeout plus
// ShutdownGrace), extensions close, core closes (slave connections), the
// store flushes and closes, the lock is released.
//
// A slave node polls its HA client's status every MonitorInterval to run the
// extensions' OnMasterConnect hooks when the connection comes up.
//
// Security (docs/security.md): Config.APITLS serves the API over TLS
// (ServerTLS loads the PEM files; a client CA makes it mutual) and
// Config.APIToken requires a bearer token on every route but the probes.
// Config.HATLS, HAAllow, HAAllowClientNames, HAMaxConns and HAMaxConnsPerIP
// are handed to the builtin tcp transport (a master's listener or a slave's
// dialer); with another transport plugin, TLS and allow lists refuse to
// start and the limits are left to that plugin. Config.MasterAPIClient
// (APIClient: TLS plus a TokenTransport) is what a slave's extensions use to
// call the master's API. The API listener is bounded by
// api.DefaultMaxConns (Config.APIMaxConns).
package node
