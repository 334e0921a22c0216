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
// value means the same thing wherever it is written. Value is the standard
// library's flag.Value, and a boolean is one whose IsBoolFlag says so, as
// in the flag package.
//
// Parse runs small steps in order, each checking its source before the next
// runs: parseArgs (global flags, the command, its flags and arguments),
// applyDefaults, applyConfigFile (applyGlobalAttrs, then applyBlock per
// command block), checkEnv (unknown REPLICATOR_* variables), applyEnv,
// applyFlags, checkRequired.
//
// # Why not a library
//
// Issue 18 asked whether the standard flag package, hcl/v2's gohcl with a
// small environment overlay, peterbourgon/ff or kong should replace this
// package. It stays, for these reasons (measured in session 8 with a
// prototype of the master command on flag.FlagSet over this package's
// Values, on the same bad inputs):
//
//   - flag.FlagSet could replace only the command-line scan (parseArgs and
//     its helpers, about 90 of this package's 1.3 k lines; the values, the
//     file, the environment, the help text and the suggestions stay). Its
//     messages lose what ours give: "flag provided but not defined:
//     -segmnt-size" against "--segmnt-size: unknown flag for master (did
//     you mean "--segment-size"?)", "flag needs an argument: -listen"
//     against "--listen: missing value (want --listen ADDR)", "invalid value
//     "fast" for flag -replication: invalid value ..." against
//     "--replication: invalid value "fast" (want async, sync)". It stops at
//     the first argument that is not a flag, so `replicator put MESSAGE
//     --topic T` and global flags after the command need a loop of FlagSets
//     around it, and rewording its errors means matching their text. The
//     Values are flag.Values already, so nothing else would change.
//   - gohcl decodes into Go structs with hcl tags: the options would be
//     declared twice (the option table and a struct per command block), and
//     the file is already read with hcl/v2's own parser (file.go), whose
//     ranges give the file:line,column of every refused key and value.
//   - ff (v3) reads flags, environment and a file into a flag.FlagSet, but
//     has no HCL parser (the file format would change), ignores unknown
//     REPLICATOR_* variables instead of refusing them, and its file errors
//     carry no line. kong (struct tags, its own help layout) would change
//     the --help text that docs/operators.md documents flag by flag and the
//     docs check scrapes, and reads HCL only through a further module.
//
// Each would cost the error messages the issue asks to keep (the key, and
// the flag, variable or file:line it came from) for little code saved.
package config
