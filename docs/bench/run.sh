#!/usr/bin/env bash
# Reproduces the figures of docs/benchmarks.md in one session: the machine,
# `replicator bench` (builtin and external store, api and library, medians of
# RUNS runs), the 4 GiB catch-up memory run, and the peer anchors of
# ../shared/bench (loopback, disk, Redis, PostgreSQL, hashicorp/raft).
#
#   docs/bench/run.sh                 # everything, RUNS=3 (about 40 minutes on 2 cores)
#   SKIP_ANCHORS=1 docs/bench/run.sh  # replicator only
#
# Needs (Debian, as root) for the anchors:
#   apt-get install -y iperf3 fio jq redis-server redis-tools postgresql
# Output: $OUT (default docs/bench/results) — *.jsonl from `replicator bench
# --json`, *.txt tables, anchors.txt RESULT lines, logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-docs/bench/results}"
RUNS="${RUNS:-3}"
ANCHORS="${ANCHORS:-/work/shared/bench}"
BIN="${BIN:-bin}"
mkdir -p "$OUT" "$BIN/plugins"

go build -o "$BIN/replicator" ./cmd/replicator
go build -o "$BIN/plugins/replicator-store-commitlog" ./plugins/commitlog/cmd/replicator-store-commitlog

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) (plus uncommitted work: $(git status --short 2>/dev/null | wc -l) paths)"
  echo "nproc: $(nproc)"
  echo "cpu: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
  echo "memory: $(free -g | awk '/^Mem:/{print $2}') GiB"
  echo "kernel: $(uname -r)"
  echo "go: $(go version | awk '{print $3}')"
  echo "disk: $(df -hT "${TMPDIR:-/tmp}" | awk 'NR==2{print $1, $2, $3}')"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

run_bench() { # name, args...
  local name="$1"; shift
  echo "# replicator bench $* ($(date -u +%T))" >&2
  "$BIN/replicator" --plugins "$BIN/plugins" bench --json "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.log"
}
run_bench replicator --runs "$RUNS" --store builtin,external
run_bench rss-4gib --via api --size 4GiB catchup

if [ "${SKIP_ANCHORS:-0}" != 1 ]; then
  echo "# anchors ($(date -u +%T))" >&2
  RUNS="$RUNS" DIRS="${TMPDIR:-/tmp}" QUIET_MAX_S="${QUIET_MAX_S:-2}" "$ANCHORS/run-all.sh" \
    >"$OUT/anchors.txt" 2>"$OUT/anchors.log" || true
fi
echo "# done ($(date -u +%T)); results in $OUT" >&2
