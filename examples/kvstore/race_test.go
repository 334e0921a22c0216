//go:build race

package main

// raceEnabled: the test binary runs with the race detector, so the kvstore
// binary it builds does too (and reuses the same build cache).
const raceEnabled = true
