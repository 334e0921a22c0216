package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/replicatorhq/replicator/internal/config"
)

// TestApplyGC: the default GC target applies unless GOGC / GOMEMLIMIT are
// in the environment; an explicit option wins over them.
func TestApplyGC(t *testing.T) {
	pct, lim := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(lim) })
	def := globalOpts{GCPercent: defaultGCPercent}
	cases := []struct {
		name    string
		g       globalOpts
		sources map[string]config.Source
		environ []string
		wantPct int
		wantLim int64
	}{
		{"defaults", def, nil, nil, defaultGCPercent, math.MaxInt64},
		{"default source", def, map[string]config.Source{"gc-percent": config.SourceDefault}, nil, defaultGCPercent, math.MaxInt64},
		{"GOGC in the environment", def, nil, []string{"GOGC=50", "GOMEMLIMIT=1GiB"}, 100, 7 << 20},
		{"flag over GOGC", globalOpts{GCPercent: 200, GCMemoryLimit: 64 << 20},
			map[string]config.Source{"gc-percent": config.SourceFlag, "gc-memory-limit": config.SourceEnv},
			[]string{"GOGC=50", "GOMEMLIMIT=1GiB"}, 200, 64 << 20},
		{"collector off", globalOpts{GCPercent: -1, GCMemoryLimit: 32 << 20}, map[string]config.Source{"gc-percent": config.SourceFile}, nil, -1, 32 << 20},
	}
	t.Run("not a daemon", func(t *testing.T) {
		debug.SetGCPercent(100)
		applyGC("bench", def, nil, nil)
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("bench: GC percent %d, want Go's 100", got)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The values the runtime would hold from the environment.
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(7 << 20)
			applyGC("master", c.g, c.sources, c.environ)
			if got := debug.SetGCPercent(100); got != c.wantPct {
				t.Errorf("GC percent %d, want %d", got, c.wantPct)
			}
			if got := debug.SetMemoryLimit(-1); got != c.wantLim {
				t.Errorf("memory limit %d, want %d", got, c.wantLim)
			}
		})
	}
}
