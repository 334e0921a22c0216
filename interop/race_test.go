//go:build race

package interop

// raceEnabled builds the replicator binary with -race when the tests run with it.
const raceEnabled = true
