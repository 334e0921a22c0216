#!/usr/bin/env bash
# Fails when the committed generated code under sdk/proto differs from a
# fresh generation (run by `make proto-check`, part of `make lint`).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
./gen.sh "$tmp"
status=0
for f in $(cd "$tmp" && find . -name '*.go' | sort); do
  if ! cmp -s "$tmp/$f" "$f"; then echo "sdk/proto: $f differs from a fresh generation (run make proto)"; status=1; fi
done
for f in $(find . -name '*.pb.go' | sort); do
  [ -e "$tmp/$f" ] || { echo "sdk/proto: $f has no .proto source"; status=1; }
done
exit $status
