// Package proctest runs real replicator processes for tests: it builds the
// binary once, starts nodes on free loopback ports with their output in a
// log file, kills (SIGKILL), stops (SIGTERM) and restarts them, and always
// kills and reaps them at the end of the test. It also has a small HTTP
// client for the node API, polling with deadlines (never sleeping as
// synchronisation), and a raw comparison and scan of commit-log segment
// files.
//
// A test package builds the binary in TestMain:
//
//	bin, cleanup, err := proctest.Build(raceEnabled)
//	...
//	m := proctest.StartMaster(t, bin, dataDir, "--replication", "sync")
//	s := proctest.StartSlave(t, bin, slaveDir, m.HA, m.API)
//	m.Kill()            // kill -9, reaped
//	m.Restart()         // same arguments, same ports, waits for /readyz
//
// StartAutoSwitch starts a node of either role with --ha-protocol autoswitch
// and an HA address of its own (a slave listens on it once promoted);
// Client.Role sends POST /v1/role and Client.WaitStatus polls the status.
//
// Processes never inherit REPLICATOR_* environment variables.
package proctest
