// Package core is replicator's replication pipeline: the master (accept loop,
// per-slave reader and writer, ack tracking, group transfer for sync
// replication) and the slave HA client (connect, report, receive, verify,
// append, re-report). It knows the store and the transport only through the
// sdk/store and transport interfaces.
package core
