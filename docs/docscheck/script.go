package docscheck

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// portRE matches host:port (or :port) with a port of 4 or 5 digits.
var portRE = regexp.MustCompile(`(^|[^0-9A-Za-z.])((?:\d{1,3}\.){3}\d{1,3}|localhost|\[::1\])?:(\d{4,5})\b`)

// Ports returns the port numbers (>= 1024) that text mentions as host:port
// or :port, sorted.
func Ports(text string) []int {
	seen := map[int]bool{}
	for _, m := range portRE.FindAllStringSubmatch(text, -1) {
		if p, err := strconv.Atoi(m[3]); err == nil && p >= 1024 && p <= 65535 {
			seen[p] = true
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// MapPorts replaces every port of Ports(text) that is in m.
func MapPorts(text string, m map[int]int) string {
	return portRE.ReplaceAllStringFunc(text, func(s string) string {
		sub := portRE.FindStringSubmatch(s)
		p, _ := strconv.Atoi(sub[3])
		if q, ok := m[p]; ok {
			return sub[1] + sub[2] + ":" + strconv.Itoa(q)
		}
		return s
	})
}

// Server describes a long-running command: its program's base name and its
// command word. In a document it must end with & (pasted into a shell, it
// would block otherwise).
type Server struct {
	Program, Command string
}

// globalValueFlags are replicator's global flags that take a value.
var globalValueFlags = map[string]bool{"--plugins": true, "--config": true, "--log-level": true, "--log-format": true}

// serverOf returns the server a command line starts, if any.
func serverOf(line string, servers []Server) (Server, bool) {
	f := strings.Fields(line)
	i := 0
	for i < len(f) && strings.Contains(f[i], "=") && !strings.HasPrefix(f[i], "-") { // VAR=value prefixes
		i++
	}
	if i >= len(f) {
		return Server{}, false
	}
	prog := f[i]
	if j := strings.LastIndex(prog, "/"); j >= 0 {
		prog = prog[j+1:]
	}
	for i++; i < len(f); i++ {
		if !strings.HasPrefix(f[i], "-") {
			break
		}
		if globalValueFlags[f[i]] {
			i++
		}
	}
	if i >= len(f) {
		return Server{}, false
	}
	for _, s := range servers {
		if s.Program == prog && s.Command == f[i] {
			return s, true
		}
	}
	return Server{}, false
}

// shellQuote quotes s for bash.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var (
	expectRE  = regexp.MustCompile(`^(.*?)\s+#\s*=>\s?(.*)$`)
	configRE  = regexp.MustCompile(`(^|\s)--config[=\s]`)
	heredocRE = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)
)

// Script turns the ```sh blocks of d into one bash script body (the
// prelude and epilogue are the runner's). Ports must already be mapped.
// Commands that read a configuration file (--config) run without the
// variables in noEnv: the runner's environment must not override the file.
func Script(d *Doc, servers []Server, noEnv []string) string {
	unset := ""
	for _, v := range noEnv {
		unset += "-u " + v + " "
	}
	withoutEnv := func(cmd string) string {
		if unset == "" || !configRE.MatchString(cmd) {
			return cmd
		}
		return "env " + unset + cmd
	}
	var b strings.Builder
	for _, blk := range d.Blocks {
		if blk.Lang != "sh" {
			continue
		}
		fmt.Fprintf(&b, "\n# %s:%d\n", d.Path, blk.Line)
		lines := strings.Split(blk.Text, "\n")
		for i := 0; i < len(lines); i++ {
			line := lines[i]
			start := i
			// Join continuation lines.
			for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
			}
			trimmed := strings.TrimSpace(line)
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			fmt.Fprintf(&b, "__docs_echo %s\n", shellQuote(fmt.Sprintf("%s:%d: %s", d.Path, blk.Line+1+start, trimmed)))
			// A here-document: copy it verbatim up to its terminator.
			if m := heredocRE.FindStringSubmatch(line); m != nil {
				b.WriteString(line + "\n")
				for i+1 < len(lines) {
					i++
					b.WriteString(lines[i] + "\n")
					if strings.TrimSpace(lines[i]) == m[1] {
						break
					}
				}
				continue
			}
			if m := expectRE.FindStringSubmatch(line); m != nil {
				fmt.Fprintf(&b, "__docs_out=$(%s)\n__docs_expect %s \"$__docs_out\" %s\n", m[1], shellQuote(strings.TrimSpace(m[2])), shellQuote(strings.TrimSpace(m[1])))
				continue
			}
			_, isServer := serverOf(trimmed, servers)
			cmd := trimmed
			if j := strings.Index(cmd, " #"); j >= 0 {
				cmd = strings.TrimSpace(cmd[:j])
			}
			background := strings.HasSuffix(cmd, "&")
			if isServer && !background {
				fmt.Fprintf(&b, "__docs_fail %s\n", shellQuote(fmt.Sprintf("%s:%d: a server command must end with & (pasted into a shell, it would block): %s", d.Path, blk.Line+1+start, trimmed)))
				continue
			}
			if !background {
				b.WriteString(withoutEnv(line) + "\n")
				continue
			}
			// No wait here: the document itself waits for what it needs
			// (replicator status --wait-ready, kvstore status --wait, ...),
			// as a user pasting it would.
			fmt.Fprintf(&b, "%s &\n__docs_started $!\n", withoutEnv(strings.TrimSpace(strings.TrimSuffix(cmd, "&"))))
		}
	}
	return b.String()
}

// Prelude is the start of every generated script: strict mode, helpers,
// and wrappers for make and go that act on the repository (repo) with
// their output in the working directory.
func Prelude(repo string) string {
	return `set -euo pipefail
REPO=` + shellQuote(repo) + `
__docs_pids=()
__docs_echo() { printf '+ %s\n' "$1" >&2; }
__docs_started() { __docs_pids+=("$1"); }
__docs_fail() {
	echo "docs-check: $1" >&2
	exit 1
}
__docs_expect() {
	if [[ "$2" != "$1" ]]; then
		printf 'docs-check: %s printed\n%s\nwant\n%s\n' "$3" "$2" "$1" >&2
		exit 1
	fi
}
__docs_stop() {
	local rc=$? pid st live=()
	# Processes the document stopped itself are not checked again.
	for pid in "${__docs_pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			live+=("$pid")
			kill -TERM "$pid" 2>/dev/null || true
		fi
	done
	for pid in "${live[@]}"; do
		st=0
		wait "$pid" 2>/dev/null || st=$?
		if ((st != 0)); then
			echo "docs-check: background process $pid exited with status $st after SIGTERM" >&2
			((rc == 0)) && rc=1
		fi
	done
	exit "$rc"
}
trap __docs_stop EXIT
make() {
	case "${1:-}" in
	build | plugins | demo) command make -C "$REPO" BIN="$PWD/bin" "$@" ;;
	*) echo "docs-check: skipping 'make $*' (not run by the docs check)" >&2 ;;
	esac
}
promtool() {
	if ! command -v promtool >/dev/null; then
		echo "docs-check: skipping 'promtool $*' (promtool is not installed)" >&2
		return 0
	fi
	(cd "$REPO" && command promtool "$@")
}
go() {
	local args=() out=0 a
	for a in "$@"; do
		if ((out)) && [[ $a != /* ]]; then a="$PWD/$a"; fi
		out=0
		[[ $a == -o ]] && out=1
		args+=("$a")
	done
	(cd "$REPO" && command go "${args[@]}")
}
`
}
