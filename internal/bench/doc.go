// Package bench is the scenario engine of `replicator bench`: it measures
// how fast a master and a slave replicate on this machine, next to the
// machine's limits measured in the same run, and reports one Result per
// scenario point.
//
// Scenarios:
//
//   - catchup: a master holding a log of Config.Size bytes (written once
//     with the builtin commit log, 4000-byte bodies) and a fresh slave; MB/s
//     from the slave's start until its max offset equals the master's. Raw
//     loopback TCP for the same number of bytes is measured right before
//     each run, and the run's ratio is taken against it. Peak resident
//     memory of the master and the slave is sampled while the log
//     replicates.
//   - sync and async: Config.Producers concurrent producers of
//     Config.MsgSize-byte messages for Config.Duration (after an unmeasured
//     warm-up) on a SYNC_MASTER or ASYNC_MASTER with one slave; msgs/s, MB/s
//     of message bodies, put latency percentiles, and for async the
//     replication lag: a sampler picks a put every LagEvery, waits until the
//     slave's max offset passes the put's next offset, and records the time
//     from the put's return until then.
//
// Each runs through the daemon's API (Via "api": the master and the slave
// are child processes of the replicator binary Config.Exe, the producers
// call the HTTP API from this process, as a remote producer sees it) or
// through the library (Via "library": core.Master and core.SlaveNode in this
// process, over real loopback TCP), and on the builtin commit-log store or
// the same store as an external plugin binary
// (Config.PluginsDir/replicator-store-commitlog).
//
// Limits, measured once before the scenarios (Measure): raw loopback TCP
// throughput (benchload.RawLoopback: a plain Go sender and receiver of
// 32 KiB frames), the 8-byte request/ack round trip (the floor under a
// sync put) with both ends in this process and, when
// LimitsConfig.EchoCmd names this binary's child entry point (EchoArg,
// EchoChild), with the echoing end in a child process and along three
// processes (this one -> a relay child -> an echo child and back: a sync
// put through the daemons with no processing), all alternating in
// slices; and, in the scratch directory, sequential writes (1 MiB
// writes, fdatasync every 4 MiB), 4 KiB write+fdatasync operations per
// second, and filling a fresh file's page-cache pages (32 KiB pwrites, no
// sync; benchload.RawPageWrite), the least a slave does with each byte.
// Every result carries them and its ratio to loopback TCP
// (ratio_to_limit), to the disk's sequential write rate (ratio_to_disk)
// and to the page-cache fill (ratio_to_page_write); points with a put
// latency carry their p50 as multiples of the round trips (p50_per_rtt,
// p50_per_rtt_xproc, p50_per_rtt_chain) and of floor_p50_ms, the
// process-to-process links the put crosses in series times the
// cross-process round trip (api and client points).
//
// CPU comes from /proc/PID/stat (user + system ticks) of the master and
// slave groups (each daemon with its plugin processes) and of this process,
// read at the start and the end of the measured phase: microseconds per
// message for sync and async points (master_/slave_/process_cpu_us_per_msg),
// and for a catch-up via the API nanoseconds per KB received, from the
// slave's first status answer until it holds the whole log
// (master_/slave_cpu_ns_per_kb). On a shared machine the rate follows the
// other load; the CPU per unit of work moves much less.
//
// Memory comes from /proc/PID/status (Linux): VmHWM (the peak resident set;
// reset through /proc/PID/clear_refs before each measured phase), and the
// largest RssAnon (heap, stacks) and RssFile (mapped commit-log pages)
// sampled every RSSEvery. External store plugin processes are reported
// apart (the children of each node process).
//
// Results are streamed to Config.Emit in order; Run writes progress lines
// to Config.Progress. WriteTable renders results as a text table; each
// Result marshals to one JSON object with the keys listed on Result (null
// where a key does not apply).
package bench
