package main

import (
	"math"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/replicatorhq/replicator/internal/config"
)

// The Go garbage collector's settings of a replicator process.
//
// A master under many producers allocates about one message body per put
// (the stream's decoded request) while its live heap stays small (15 MiB
// of anonymous memory at 64 producers), so with Go's default GOGC=100 it
// collects dozens of times a second: the mark workers, assists and
// sweeping cost 13–15 % of its CPU at 64 producers (1–4 % at GOGC=400).
// defaultGCPercent lets the heap grow to 5 × the live
// heap between collections instead (a few tens of MiB); docs/benchmarks.md
// has the measurement. --gc-memory-limit adds Go's soft memory limit
// (GOMEMLIMIT) for hosts that must bound the process: the collector then
// runs more often when the heap nears it, whatever --gc-percent says.
const defaultGCPercent = 400

// gcDaemons are the commands that run a long-lived node or controller: the
// GC options apply to them only. The other commands (bench and its
// in-process library producers, put, demo ...) keep Go's defaults, as a
// program embedding the library or the client would.
var gcDaemons = map[string]bool{"master": true, "slave": true, "node": true, "controller": true}

// gcOptions are the global GC options (applied to gcDaemons).
func gcOptions(g *globalOpts) []*config.Option {
	return []*config.Option{
		{Name: "gc-percent", Meta: "N", Help: "master, slave, node, controller: Go GC target: heap growth in percent of the live heap between collections (GOGC); -1 turns the collector off (then set --gc-memory-limit). Without this option an environment GOGC wins",
			Default: strconv.Itoa(defaultGCPercent), Value: config.Int(&g.GCPercent, -1, math.MaxInt32)},
		{Name: "gc-memory-limit", Meta: "SIZE", Help: "master, slave, node, controller: Go soft memory limit (GOMEMLIMIT); 0: none. Without this option an environment GOMEMLIMIT wins",
			Default: "0", Value: config.Size(&g.GCMemoryLimit, 0, math.MaxInt64)},
	}
}

// applyGC sets the collector from g when cmd is one of gcDaemons. An
// option left at its default leaves the runtime's own setting alone when
// the matching Go variable (GOGC, GOMEMLIMIT) is in environ, so that Go's
// usual knobs keep working.
func applyGC(cmd string, g globalOpts, sources map[string]config.Source, environ []string) {
	if !gcDaemons[cmd] {
		return
	}
	if explicit(sources, "gc-percent") || !inEnv(environ, "GOGC") {
		debug.SetGCPercent(g.GCPercent)
	}
	if explicit(sources, "gc-memory-limit") || !inEnv(environ, "GOMEMLIMIT") {
		limit := g.GCMemoryLimit
		if limit == 0 {
			limit = math.MaxInt64 // the runtime's "no limit"
		}
		debug.SetMemoryLimit(limit)
	}
}

// explicit reports whether option name was set by a flag, the environment
// or the configuration file (not its default).
func explicit(sources map[string]config.Source, name string) bool {
	s, ok := sources[name]
	return ok && s != config.SourceDefault
}

// inEnv reports whether environ sets the variable name (to anything).
func inEnv(environ []string, name string) bool {
	for _, kv := range environ {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}
