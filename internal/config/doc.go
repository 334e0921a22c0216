// Package config parses a command line the way replicator's commands want it:
// every option is a command-line flag, a key of an HCL configuration file and
// an environment variable, and a value given in a later source wins over an
// earlier one:
//
//	default  <  config file  <  environment  <  command-line flag
//
// Names are derived from the flag name. For the flag --segment-size of the
// command master:
//
//	flag          --segment-size 64MiB   (also --segment-size=64MiB, -segment-size 64MiB)
//	HCL key       master { segment_size = "64MiB" }
//	environment   REPLICATOR_MASTER_SEGMENT_SIZE=64MiB
//
// Global options (those given before the command) sit at the top level of the
// file and have no command part in their variable: log_level = "debug",
// REPLICATOR_LOG_LEVEL=debug.
//
// A configuration file may hold one block per command; every block is checked,
// not only the one of the command being run, so a typo is found the first time
// the file is used. Unknown keys, unknown blocks, unknown REPLICATOR_*
// variables and invalid values are refused with an error that names the key
// and where it came from (file:line, variable name or flag).
//
// Values are typed by the Value the option parses into: strings, addresses
// (host:port), URLs, durations (time.ParseDuration), byte sizes (1GiB, 64KiB,
// 16MB, 4096), integers within bounds, enumerations, booleans, existing
// directories and repeatable lists. The same parser checks every source, so a
// value means the same thing wherever it is written.
package config
