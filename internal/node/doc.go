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
// Start is a sequence of small steps, each checked before the next:
// lockAndListen, registerMetrics, openPlugins (store, transport, segment
// size), checkRoleHistory, startCore (a controller-mode member, an autoswitch
// replica, or a classic slave or master), newAPI, startExtensions,
// newHTTPServer. Whatever a step acquired, closeAll releases.
//
// Connection events are pushed, not polled: core calls the node (a classic
// slave's SlaveNode.OnConnect, an autoswitch node's Replica.OnConnect) each
// time the slave's connection reaches TRANSFER, and the node runs the
// extensions' OnMasterConnect hooks, once per connection, however briefly
// the link was down. An extension that starts after the connection came up
// gets its hook run at registration. A classic slave's master-log check
// (masterbehind.go, with --master-api) learns of appends from the store's
// Watch and reads the master's status one report interval after the last
// append or check.
//
// A runtime role change (ChangeRole, POST /v1/role) is pushed to the
// extensions: once core.Replica has switched, the node records the current
// role and master API (replicator_build_info's role label, a slave's 403
// master_api) and runs the ExtensionEnv.OnRoleChange hooks with a
// RoleChange, in registration order, before the request answers; changes
// are serialised, a refused change runs none.
//
// # Role history and autoswitch
//
// Before core starts, the node reads DATA/role (RoleRecord: the last role,
// protocol, epoch, broker id and time, one JSON object, written atomically
// with WriteRoleFile: tmp file, fsync, rename, directory fsync). A classic
// slave refuses a directory whose last role was master while its log holds
// data (ErrDivergedRejoin, DivergedRejoinMessage) unless
// Config.AllowDivergedRejoin. The broker id is Config.BrokerID, else the
// stored one, else NewBrokerID (1 to MaxGeneratedBrokerID), kept in the file.
//
// With Config.Protocol = core.ProtocolAutoSwitch the node opens the epoch
// file (core/epoch, DATA/epochFileCheckpoint) and runs a core.Replica: a
// master takes a new epoch at every start (BecomeMaster(0): last + 1 at the
// max offset) and records "master"; a slave follows MasterHA and records
// "slave" once it reached TRANSFER (after the handshake's truncation), so
// a directory that was a master stays marked as one until its log agrees
// with its new master's. POST /v1/role (Node.ChangeRole, api.RoleChanger)
// promotes (BecomeMaster) or demotes / re-points (BecomeSlave), serialised
// with the role-file writes; with Config.ReadConfirmed a slave's reads stop
// at the confirm offset (api.Config.ReadLimit).
//
// Security (docs/security.md): Config.APITLS serves the API over TLS
// (ServerTLS loads the PEM files; a client CA makes it mutual) and
// Config.APIToken requires a bearer token on every route but the probes.
// Config.HA (a transport.Security: HA TLS, allow lists, connection limits,
// transfer rate) reaches the transport through its
// transport.Securer capability (a master's listener or a slave's dialer),
// whichever plugin provides it: the builtin tcp transport has it; with a
// transport without it, TLS and allow lists refuse to start and the limits
// are left to that transport (one log line). Config.MasterAPIClient
// (APIClient: TLS plus a TokenTransport) is what a slave's extensions use to
// call the master's API. The API listener is bounded by
// api.DefaultMaxConns and api.DefaultMaxConnsPerIP (Config.APIMaxConns,
// APIMaxConnsPerIP; idle connections are closed first at a limit), and
// keep-alive connections by Config.APIIdleTimeout.
package node
