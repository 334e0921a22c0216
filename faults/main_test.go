package faults

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/internal/proctest"
)

// bin is the replicator binary built once by TestMain.
var bin string

var (
	flagLong   = flag.Bool("faults.long", false, "run the long fault suite (also REPLICATOR_FAULTS=long)")
	flagCycles = flag.Int("faults.cycles", 0, "kill -9 cycles of the master per seed (default 4, long 60)")
	flagSeeds  = flag.String("faults.seeds", "", "comma-separated seeds (default 1, long 1,2,3)")
)

// long reports whether the long form runs.
func long() bool { return *flagLong || os.Getenv("REPLICATOR_FAULTS") == "long" }

// seeds returns the seeds every scenario runs with.
func seeds(t *testing.T) []uint64 {
	t.Helper()
	s := *flagSeeds
	if s == "" {
		s = "1"
		if long() {
			s = "1,2,3"
		}
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("-faults.seeds: %q: %v", f, err)
		}
		out = append(out, v)
	}
	return out
}

// cycles is the number of kill -9 cycles of the master per seed.
func cycles() int {
	switch {
	case *flagCycles > 0:
		return *flagCycles
	case long():
		return 60
	}
	return 4
}

func TestMain(m *testing.M) {
	flag.Parse()
	// toxiproxy logs through zerolog's global logger; the tests read the
	// nodes' logs, not the proxy's.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	// The replicator processes are plain builds: kill -9 cycles of
	// race-detector builds take ten times longer. REPLICATOR_FAULTS_RACE=1
	// (with go test -race) builds them with the race detector too.
	b, cleanup, err := proctest.Build(raceEnabled && os.Getenv("REPLICATOR_FAULTS_RACE") == "1")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = b
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			// toxiproxy v2.5.0 leaves a link's goroutines blocked on its
			// internal channels when a connection dies while toxics are
			// added or removed (for example a bandwidth toxic holding a
			// chunk whose writer has exited). They belong to the embedded
			// proxy, not to replicator code, and end with the test binary.
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
