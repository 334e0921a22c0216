// Package benchload drives benchmark load against a replica group: the one
// place that measures put throughput and latency (Drive, SyncPuts) and that
// sets up a catch-up (Fill, CatchUpOnce, RawLoopback, WaitMax), shared by
// the Go benchmarks of core and of the commit-log store plugin and by
// `replicator bench` (internal/bench).
//
// Drive runs Producers goroutines, each calling Put in a loop until Puts
// puts were made in total or Duration passed, and returns every put's
// latency (sorted) with the counts of puts that were not PUT_OK and of
// errors; the first error stops the load.
//
// A catch-up: Fill appends messages with FillBody-byte bodies to a master's
// store until it holds the asked size; CatchUpOnce starts a fresh slave on
// an empty store and times it until the slave's max offset reaches the
// master's; RawLoopback streams the same number of bytes in FrameSize
// frames over one loopback TCP connection, a plain Go sender and receiver,
// which is the limit the catch-up is compared with (the figure of
// ../shared/bench/tcpframe).
package benchload
