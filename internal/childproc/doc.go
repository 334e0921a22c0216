// Package childproc runs replicator processes for the commands that start
// their own nodes (`replicator demo`, `replicator demo --failover`): one
// definition of starting a node with its output in a log file, waiting for
// it, stopping it in order and describing an early exit with the log's last
// lines.
//
// A child gets none of the parent's REPLICATOR_* variables (its settings
// are the parent's flags only). On Unix it runs in its own process group (a
// terminal's Ctrl-C reaches only the parent, which stops the children in
// order); on Linux SIGKILL is also its parent-death signal (a parent that
// dies without cleaning up takes its children along).
package childproc
