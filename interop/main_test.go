package interop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/internal/freeport"
	"github.com/replicatorhq/replicator/sdk/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	httpClient.CloseIdleConnections()
	if bin.dir != "" {
		os.RemoveAll(bin.dir)
	}
	if java.dir != "" {
		os.RemoveAll(java.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Waiting for other processes: poll every pollEvery, give up after
// waitTimeout (generous: CI machines are slow and shared).
const (
	pollEvery   = 10 * time.Millisecond
	waitTimeout = 60 * time.Second
)

// eventually polls cond until it returns nil or waitTimeout passes; then the
// test fails with the last error.
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, waitTimeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// bin is the replicator binary, built on first use (only the tests that
// run the daemon pay for it) and removed by TestMain.
var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func replicatorBin(t testing.TB) string {
	t.Helper()
	bin.once.Do(func() {
		if bin.dir, bin.err = os.MkdirTemp("", "replicator-interop-"); bin.err != nil {
			return
		}
		bin.path = filepath.Join(bin.dir, "replicator")
		args := []string{"build", "-o", bin.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "github.com/replicatorhq/replicator/cmd/replicator")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("building replicator: %w\n%s", err, out)
		}
	})
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	return bin.path
}

// java is the compiled Java peers, built on first use (javac costs 5–10 s
// on a busy machine: once per test binary, not once per test) and removed by
// TestMain.
var java struct {
	once sync.Once
	dir  string
	err  error
}

// javaClasses compiles java/*.java once and returns the class directory; it
// skips the test when no JDK is installed.
func javaClasses(t *testing.T) string {
	t.Helper()
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Skip("javac not on PATH: the Java HA peer cannot be built (Debian: apt-get install -y default-jdk-headless)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java not on PATH: the Java HA peer cannot run (Debian: apt-get install -y default-jdk-headless)")
	}
	java.once.Do(func() {
		if java.dir, java.err = os.MkdirTemp("", "replicator-interop-java-"); java.err != nil {
			return
		}
		srcs, err := filepath.Glob(filepath.Join("java", "*.java"))
		if err != nil || len(srcs) == 0 {
			java.err = fmt.Errorf("no Java sources in java/: %v", err)
			return
		}
		// C1 only and the serial collector: javac starts faster on a busy machine.
		args := []string{"-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-Xlint:all", "-Werror", "-d", java.dir}
		cmd := exec.Command(javac, append(args, srcs...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			java.err = fmt.Errorf("javac: %w\n%s", err, b)
		}
	})
	if java.err != nil {
		t.Fatal(java.err)
	}
	return java.dir
}

// proc is a child process (a Java peer, a replicator node, a RocketMQ
// broker). Its standard output is kept line by line for the test to wait
// on; standard error (and stdout too, in the log file) goes to a log shown
// when the test fails. It is killed and reaped when the test ends.
type proc struct {
	t     testing.TB
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   string

	mu    sync.Mutex
	lines []string

	done chan struct{} // closed once the process is reaped
	err  error         // Wait's result, set before done closes
}

// startProc runs name with args (env nil: the test's environment without
// REPLICATOR_* variables) in dir ("" = the test's directory).
func startProc(t testing.TB, label string, env []string, dir string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: label, log: filepath.Join(t.TempDir(), label+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== %s %s\n", name, strings.Join(args, " "))
	p.cmd = exec.Command(name, args...)
	p.cmd.Dir = dir
	if env == nil {
		env = cleanEnv()
	}
	p.cmd.Env = env
	p.cmd.Stderr = logf
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", label, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stdout)
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			if len(b) > 32<<10 {
				b = append([]byte("...\n"), b[len(b)-32<<10:]...)
			}
			t.Logf("--- log of %s:\n%s", p.name, b)
		}
	})
	return p
}

// cleanEnv is the environment without REPLICATOR_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REPLICATOR_") {
			env = append(env, kv)
		}
	}
	return env
}

// kill sends SIGKILL (if still running) and waits until the process is reaped.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// wait waits up to waitTimeout for the process to exit and returns Wait's
// result; a process still running then fails the test.
func (p *proc) wait() error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(waitTimeout):
		p.t.Fatalf("%s still running after %s", p.name, waitTimeout)
		return nil
	}
}

// send writes one command line to the process's standard input.
func (p *proc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("%s: writing %q: %v", p.name, line, err)
	}
}

// output returns the lines read so far.
func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// waitLine waits for a line matching re and returns its submatches. A
// process that exits first fails the test.
func (p *proc) waitLine(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	eventually(p.t, p.name+": a line matching "+re, func() error {
		for _, l := range p.output() {
			if m = rx.FindStringSubmatch(l); m != nil {
				return nil
			}
		}
		if done, err := p.exited(); done {
			p.t.Fatalf("%s exited (%v) before printing a line matching %s", p.name, err, re)
		}
		return errors.New("no such line yet")
	})
	return m
}

// events parses the Java peers' output lines "WORD N [N...]" with the given
// word into their numbers.
func (p *proc) events(word string) [][]int64 {
	var out [][]int64
	for _, l := range p.output() {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != word {
			continue
		}
		var nums []int64
		for _, s := range f[1:] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				break
			}
			nums = append(nums, n)
		}
		out = append(out, nums)
	}
	return out
}

// count returns how many output lines equal line.
func (p *proc) count(line string) int {
	n := 0
	for _, l := range p.output() {
		if l == line {
			n++
		}
	}
	return n
}

// noErrors fails the test if the Java peer printed an "error" line.
func (p *proc) noErrors() {
	p.t.Helper()
	for _, l := range p.output() {
		if strings.HasPrefix(l, "error ") {
			p.t.Fatalf("%s: %s", p.name, l)
		}
	}
}

// freeAddrs returns n distinct free 127.0.0.1 addresses (internal/freeport).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	a, err := freeport.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// segmentRE matches a commit-log segment file name: its start offset in 20 digits.
var segmentRE = regexp.MustCompile(`^[0-9]{20}$`)

func segName(start int64) string { return store.SegmentName(start) }

// sameLog compares the commit log in dir (its segment files) with the one in
// ref over [from, to): the files in dir must be exactly the segments that
// cover [from, to), starting with from's segment, and each must equal ref's
// file of the same name over its length. A file of dir may be shorter than
// the segment size (a Java HaSlave file holds only the bytes received) but
// must cover the range. It returns nil or what differs.
func sameLog(dir, ref string, segSize, from, to int64) error {
	return compareLogs(dir, ref, segSize, from, to, false)
}

// compareLogs is sameLog; with zeroTail, dir may also hold later segment
// files that are all zeros (RocketMQ preallocates the next files).
func compareLogs(dir, ref string, segSize, from, to int64, zeroTail bool) error {
	names, err := listSegments(dir)
	if err != nil {
		return err
	}
	var want []int64
	for s := from - from%segSize; s < to; s += segSize {
		want = append(want, s)
	}
	if zeroTail && len(names) > len(want) {
		for _, s := range names[len(want):] {
			b, err := os.ReadFile(filepath.Join(dir, segName(s)))
			if err != nil {
				return err
			}
			if i := firstDiff(b, make([]byte, len(b))); i >= 0 {
				return fmt.Errorf("segment %s past the range [%d, %d) holds data at byte %d", segName(s), from, to, i)
			}
		}
		names = names[:len(want)]
	}
	if !slices.Equal(names, want) {
		return fmt.Errorf("segments of %s: %v, want %v", dir, names, want)
	}
	for _, s := range names {
		a, err := os.ReadFile(filepath.Join(dir, segName(s)))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(ref, segName(s)))
		if err != nil {
			return err
		}
		need := min(segSize, to-s)
		if int64(len(a)) < need || int64(len(a)) > segSize || int64(len(b)) != segSize {
			return fmt.Errorf("segment %s: %d bytes here, %d in %s, want at least %d of %d", segName(s), len(a), len(b), ref, need, segSize)
		}
		if i := firstDiff(a, b[:len(a)]); i >= 0 {
			return fmt.Errorf("segment %s differs from %s at byte %d (offset %d)", segName(s), ref, i, s+int64(i))
		}
	}
	return nil
}

func listSegments(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range ents {
		if segmentRE.MatchString(e.Name()) {
			n, _ := strconv.ParseInt(e.Name(), 10, 64)
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
