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

// addrs returns the TCP addresses a line names (comments included), for
// waiting until a server listens: host:port, :port and URLs; 0.0.0.0 and
// an empty host mean 127.0.0.1.
func addrs(line string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range portRE.FindAllStringSubmatch(line, -1) {
		host := m[2]
		if host == "" || host == "0.0.0.0" || host == "localhost" {
			host = "127.0.0.1"
		}
		if host == "[::1]" {
			host = "::1"
		}
		a := host + ":" + m[3]
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// Server describes a long-running command: its program's base name, its
// command word, and the addresses it listens on by default (used when the
// line names none).
type Server struct {
	Program, Command string
	Defaults         []string
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
			srv, isServer := serverOf(trimmed, servers)
			if !isServer && !strings.HasSuffix(trimmed, "&") {
				b.WriteString(withoutEnv(line) + "\n")
				continue
			}
			cmd := trimmed
			comment := ""
			if j := strings.Index(cmd, " #"); j >= 0 {
				cmd, comment = strings.TrimSpace(cmd[:j]), cmd[j:]
			}
			cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
			wait := addrs(cmd + comment)
			if len(wait) == 0 && isServer {
				wait = srv.Defaults
			}
			fmt.Fprintf(&b, "%s &\n__docs_started $! %s\n", withoutEnv(cmd), strings.Join(wait, " "))
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
__docs_started() {
	local pid=$1 a host port deadline
	shift
	__docs_pids+=("$pid")
	for a in "$@"; do
		host=${a%:*}; port=${a##*:}
		deadline=$((SECONDS + 60))
		until (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
			if ! kill -0 "$pid" 2>/dev/null; then
				echo "docs-check: the background command exited before listening on $a" >&2
				wait "$pid" || true
				exit 1
			fi
			if ((SECONDS > deadline)); then echo "docs-check: nothing listens on $a after 60s" >&2; exit 1; fi
			sleep 0.05
		done
	done
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
