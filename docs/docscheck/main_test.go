package docscheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// slowEnv turns on the slow checks (running the docs' commands, scraping
// live nodes); `make docs-check` sets it.
const slowEnv = "REPLICATOR_DOCS_CHECK"

var (
	root   string // the repository
	binDir string // binaries built for the tests
)

func TestMain(m *testing.M) {
	var err error
	if root, err = RepoRoot("."); err != nil {
		fmt.Fprintln(os.Stderr, "docscheck: repository root not found:", err)
		os.Exit(1)
	}
	if binDir, err = os.MkdirTemp("", "docscheck-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(binDir)
		os.Exit(code)
	}))
}

func slow() bool { return os.Getenv(slowEnv) != "" }

var builds sync.Map // package path -> *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// binary builds the main package pkg (e.g. "./cmd/replicator") once and
// returns the path of the binary, named name.
func binary(t *testing.T, pkg, name string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	br := v.(*buildResult)
	br.once.Do(func() {
		br.path = filepath.Join(binDir, name)
		args := []string{"build", "-o", br.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			br.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out.String())
		}
	})
	if br.err != nil {
		t.Fatal(br.err)
	}
	return br.path
}

// output runs bin with args and returns its combined output; a non-zero
// exit is fatal unless allowFail.
func output(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	return string(out)
}
