package docscheck

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// cleanEnv is the environment without REPLICATOR_* variables, so a
// developer's settings do not change what the binaries print.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REPLICATOR_") {
			env = append(env, kv)
		}
	}
	return env
}

type helpFlag = HelpFlag

var (
	replFlagRE    = regexp.MustCompile(`^\s{2}--([a-z0-9][a-z0-9-]*)(?:\s+\S+)?\s{2,}(.*)$`)
	replEnvRE     = regexp.MustCompile(`^\s+\[\$([A-Z0-9_]+)\]\s*$`)
	defaultRE     = regexp.MustCompile(`\(default ([^)]*)\)\s*$`)
	replCommandRE = regexp.MustCompile(`^\s{2}([a-z][a-z0-9-]*)\s{2,}\S`)
)

var (
	helpMu    sync.Mutex
	helpCache = map[string][]helpFlag{}
)

// replicatorHelp parses `replicator [COMMAND] --help` (once per binary and
// command).
func replicatorHelp(t *testing.T, bin string, command string) []helpFlag {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	key := bin + "\x00" + command
	if f, ok := helpCache[key]; ok {
		return f
	}
	f := parseReplicatorHelp(t, bin, command)
	helpCache[key] = f
	return f
}

func parseReplicatorHelp(t *testing.T, bin string, command string) []helpFlag {
	t.Helper()
	args := []string{"--help"}
	if command != "" {
		args = []string{command, "--help"}
	}
	var flags []helpFlag
	inGlobal := false
	for _, ln := range strings.Split(output(t, bin, args...), "\n") {
		if command == "" {
			// The program's help has other indented text: read only
			// its "Global flags" list.
			switch {
			case strings.HasPrefix(ln, "Global flags"):
				inGlobal = true
				continue
			case strings.TrimSpace(ln) == "":
				inGlobal = false
			}
			if !inGlobal {
				continue
			}
		}
		if m := replFlagRE.FindStringSubmatch(ln); m != nil {
			f := helpFlag{Name: m[1]}
			if d := defaultRE.FindStringSubmatch(m[2]); d != nil {
				f.Default = d[1]
			}
			flags = append(flags, f)
		} else if m := replEnvRE.FindStringSubmatch(ln); m != nil && len(flags) > 0 {
			flags[len(flags)-1].Env = m[1]
		}
	}
	return flags
}

// replicatorCommands parses the command list of `replicator --help`.
func replicatorCommands(t *testing.T, bin string) []string {
	t.Helper()
	var cmds []string
	in := false
	for _, ln := range strings.Split(output(t, bin, "--help"), "\n") {
		switch {
		case strings.HasPrefix(ln, "Commands:"):
			in = true
		case in && strings.TrimSpace(ln) == "":
			return cmds
		case in:
			if m := replCommandRE.FindStringSubmatch(ln); m != nil {
				cmds = append(cmds, m[1])
			}
		}
	}
	return cmds
}

// TestOperatorsDocumentsEveryFlag: docs/operators.md has a section per
// command of `replicator --help`, and each section's flag table is exactly
// the command's flags, with the same defaults.
func TestOperatorsDocumentsEveryFlag(t *testing.T) {
	bin := binary(t, "./cmd/replicator", "replicator")
	doc, err := LoadDoc(root, "docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	global, ok := SectionFlags(doc, "Global flags")
	if !ok {
		t.Errorf("docs/operators.md: no section \"Global flags\"")
	}
	for _, p := range CompareFlags(doc.Path, "Global flags", replicatorHelp(t, bin, ""), global) {
		t.Error(p)
	}

	cmds := replicatorCommands(t, bin)
	if len(cmds) < 5 {
		t.Fatalf("replicator --help lists only %v", cmds)
	}
	known := map[string]bool{}
	for _, c := range cmds {
		known[c] = true
		title := "replicator " + c
		flags, ok := SectionFlags(doc, title)
		if !ok {
			t.Errorf("docs/operators.md: no section titled `%s` for the command %q", title, c)
			continue
		}
		for _, p := range CompareFlags(doc.Path, title, replicatorHelp(t, bin, c), flags) {
			t.Error(p)
		}
	}
	// And no section for a command that does not exist.
	for _, h := range doc.Headings {
		name, ok := strings.CutPrefix(strings.ReplaceAll(h.Text, "`", ""), "replicator ")
		if ok && !strings.Contains(name, " ") && !known[name] {
			t.Errorf("docs/operators.md:%d: section for %q, which replicator --help does not list", h.Line, name)
		}
	}
}

// TestEnvironmentFollowsTheDocumentedRule: docs/operators.md documents
// one naming rule for the environment variables (REPLICATOR_ + command +
// flag, upper case, - as _; global flags without the command) instead of
// listing them; every variable --help prints must follow it.
func TestEnvironmentFollowsTheDocumentedRule(t *testing.T) {
	bin := binary(t, "./cmd/replicator", "replicator")
	text := readFile(t, "docs/operators.md")
	for _, example := range []string{"REPLICATOR_MASTER_SEGMENT_SIZE", "REPLICATOR_LOG_LEVEL"} {
		if !strings.Contains(text, example) {
			t.Errorf("docs/operators.md: the environment rule's example %s is missing", example)
		}
	}
	envName := func(cmd, flag string) string {
		n := "REPLICATOR_"
		if cmd != "" {
			n += strings.ToUpper(cmd) + "_"
		}
		return n + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	}
	for _, c := range append([]string{""}, replicatorCommands(t, bin)...) {
		for _, f := range replicatorHelp(t, bin, c) {
			if want := envName(c, f.Name); f.Env != want {
				t.Errorf("replicator %s --%s: environment variable %q, the documented rule says %q", c, f.Name, f.Env, want)
			}
		}
	}
}
