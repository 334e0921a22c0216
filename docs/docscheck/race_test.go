//go:build race

package docscheck

// raceEnabled: binaries built by the tests use the race detector too, so
// they share the build cache of `go test -race`.
const raceEnabled = true
