package docscheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/freeport"
)

// fileTimeout bounds the commands of one Markdown file.
const fileTimeout = 5 * time.Minute

// freePorts returns n distinct free TCP ports on 127.0.0.1, below the
// kernel's ephemeral range (internal/freeport).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ps, err := freeport.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// replicatorDefaultPorts are the ports of replicator's default addresses.
var replicatorDefaultPorts = []int{10911, 10912}

// docScript builds the script of d with its ports mapped to free ones, and
// the environment that maps replicator's default addresses the same way.
func docScript(t *testing.T, d *Doc, replBin string) (script string, env []string) {
	t.Helper()
	var all strings.Builder
	for _, b := range d.Blocks {
		if b.Lang == "sh" {
			all.WriteString(b.Text + "\n")
		}
	}
	ports := Ports(all.String())
	for _, p := range replicatorDefaultPorts {
		if !contains(ports, p) {
			ports = append(ports, p)
		}
	}
	for _, p := range []int{8080, 8081} { // kvstore's defaults
		if !contains(ports, p) {
			ports = append(ports, p)
		}
	}
	free := freePorts(t, len(ports))
	m := map[int]int{}
	for i, p := range ports {
		m[p] = free[i]
	}
	mapped := *d
	mapped.Blocks = nil
	for _, b := range d.Blocks {
		b.Text = MapPorts(b.Text, m)
		mapped.Blocks = append(mapped.Blocks, b)
	}
	servers := []Server{
		{Program: "replicator", Command: "master"},
		{Program: "replicator", Command: "slave"},
		{Program: "kvstore", Command: "leader"},
		{Program: "kvstore", Command: "follower"},
	}
	// Commands that rely on a default address (put without --api, ...)
	// follow the mapping through their environment variables.
	env = cleanEnv()
	var vars []string
	if replBin != "" {
		for _, c := range replicatorCommands(t, replBin) {
			for _, f := range replicatorHelp(t, replBin, c) {
				if f.Env != "" && f.Default != "" {
					if v := MapPorts(f.Default, m); v != f.Default {
						env = append(env, f.Env+"="+v)
						vars = append(vars, f.Env)
					}
				}
			}
		}
	}
	return Prelude(root) + Script(&mapped, servers, vars), env
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestDocCommands runs the ```sh blocks of every Markdown file (see the
// package documentation for the rules). Without REPLICATOR_DOCS_CHECK it
// only checks that each file's script parses (bash -n).
func TestDocCommands(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	files, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	replBin := ""
	if slow() {
		replBin = binary(t, "./cmd/replicator", "replicator")
	} else {
		t.Logf("%s is not set: the docs' commands are only parsed (make docs-check runs them)", slowEnv)
	}
	ran := 0
	for _, rel := range files {
		d, err := LoadDoc(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		has := false
		for _, b := range d.Blocks {
			has = has || b.Lang == "sh"
		}
		if !has {
			continue
		}
		ran++
		t.Run(strings.ReplaceAll(rel, "/", "_"), func(t *testing.T) {
			script, env := docScript(t, d, replBin)
			dir := t.TempDir()
			path := filepath.Join(dir, "docs-check.sh")
			if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			if !slow() {
				if out, err := exec.Command(bash, "-n", path).CombinedOutput(); err != nil {
					t.Fatalf("%s: the ```sh blocks do not parse as a bash script: %v\n%s", rel, err, out)
				}
				return
			}
			work := filepath.Join(dir, "work")
			if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := copyFile(replBin, filepath.Join(work, "bin", "replicator")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, path)
			cmd.Dir = work
			cmd.Env = append(env, "PATH="+filepath.Join(work, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			// Whatever happened, nothing the script started may survive it.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			if err != nil {
				t.Fatalf("%s: the ```sh blocks failed after %v: %v\n%s", rel, time.Since(start).Round(time.Millisecond), err, tail(out.String(), 200))
			}
			t.Logf("%s: ran in %v", rel, time.Since(start).Round(time.Millisecond))
		})
	}
	if ran == 0 {
		t.Fatal("no Markdown file has a ```sh block")
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// TestScrapedMetricsAreKnown starts a real master and slave, writes a
// message, and checks that every replicator_* family they expose is one
// ScanMetrics found: the scanner misses nothing the docs must cover.
func TestScrapedMetricsAreKnown(t *testing.T) {
	if !slow() {
		t.Skipf("%s is not set (make docs-check sets it)", slowEnv)
	}
	bin := binary(t, "./cmd/replicator", "replicator")
	known := codeMetrics(t)
	p := freePorts(t, 3)
	mAPI, mHA, sAPI := fmt.Sprintf("127.0.0.1:%d", p[0]), fmt.Sprintf("127.0.0.1:%d", p[1]), fmt.Sprintf("127.0.0.1:%d", p[2])
	dir := t.TempDir()
	startNode := func(args ...string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = cleanEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			if err := cmd.Wait(); err != nil {
				t.Errorf("replicator %s: %v\n%s", args[0], err, out.String())
			}
		})
	}
	startNode("master", "--data", filepath.Join(dir, "m"), "--listen", mAPI, "--ha-listen", mHA, "--segment-size", "1MiB")
	startNode("slave", "--data", filepath.Join(dir, "s"), "--listen", sAPI, "--master", mHA, "--segment-size", "1MiB")
	waitHTTP(t, "http://"+mAPI+"/readyz")
	waitHTTP(t, "http://"+sAPI+"/readyz")
	put := exec.Command(bin, "put", "--api", "http://"+mAPI, "hello")
	put.Env = cleanEnv() // the CLI refuses unknown REPLICATOR_* variables, this test's own included
	out, err := put.CombinedOutput()
	if err != nil {
		t.Fatalf("put: %v\n%s", err, out)
	}
	for _, api := range []string{mAPI, sAPI} {
		resp, err := http.Get("http://" + api + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		n := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "replicator_") {
				n++
				if !KnownMetric(known, f[2]) {
					t.Errorf("%s exposes %s, which ScanMetrics did not find", api, f[2])
				}
			}
		}
		resp.Body.Close()
		if n < 5 {
			t.Errorf("%s exposes only %d replicator families", api, n)
		}
	}
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s (last error %v)", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
