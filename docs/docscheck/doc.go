// Package docscheck keeps replicator's documentation honest: its tests
// (`go test ./docs/docscheck`, and `make docs-check` for the slow part)
// compare the docs with the code and run the commands they show.
//
//   - Flags: every flag that `replicator COMMAND --help` prints is in the
//     command's section of docs/operators.md (a table row starting with
//     `--flag`), with the same default, and every flag documented there
//     exists; the same for `kvstore COMMAND --help` and
//     examples/kvstore/README.md.
//   - Metrics: the metric names used by docs/operators.md, the Grafana
//     dashboard (examples/grafana) and the alert rules (examples/prometheus)
//     exist in the code, and every metric the code registers is in
//     docs/operators.md. Names are found in the Go sources (ScanMetrics);
//     with REPLICATOR_DOCS_CHECK=1 a real master and slave are scraped too.
//   - Alert rules: `promtool check rules` and `promtool test rules` when
//     promtool is installed (skipped with a message otherwise).
//   - Links: every relative link between Markdown files resolves, anchors
//     included; a link may not leave the repository.
//   - Commands: every ```sh block of every Markdown file is a script that
//     runs (with REPLICATOR_DOCS_CHECK=1; without it, only `bash -n`).
//
// # How ```sh blocks run
//
// The ```sh blocks of one Markdown file run in order as one bash script
// (set -euo pipefail) in a fresh temporary directory that holds
// bin/replicator, built from this checkout. Use ```console or ```text for
// commands that must not run (a transcript, a systemd unit, an example of
// an error).
//
//   - Ports: every host:port with a port of 1024 or more is replaced by a
//     free port, the same one for the same number throughout the file,
//     and replicator's default addresses (10911, 10912) are mapped the same
//     way through their REPLICATOR_* variables, so commands that rely on
//     defaults keep working.
//   - Servers: a line ending in & runs in the background, and
//     `replicator master`, `replicator slave`, `kvstore leader` and
//     `kvstore follower` must end in & (pasted into a shell, they would
//     block). There is no hidden wait: the script goes on at once, as a
//     shell does, so a document waits for what it needs itself
//     (`replicator status --wait-ready`, `--wait-following`,
//     `--wait-caught-up URL`; `kvstore status --wait`, `--wait-connected`,
//     `--wait-caught-up ADDR`). When the script ends the background
//     commands get SIGTERM and must exit with status 0.
//   - Output: `COMMAND  # => TEXT` checks that COMMAND prints exactly TEXT.
//   - Tools: `make build|plugins|demo`, `go` and `promtool` act on this
//     checkout (relative paths are the repository's; `go build -o` and
//     make's output land in the temporary directory); other make targets
//     (test, bench, fuzz, lint, ...) are skipped with a note, and so is
//     promtool when it is not installed.
package docscheck
