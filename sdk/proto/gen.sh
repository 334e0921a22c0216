#!/usr/bin/env bash
# Regenerates the Go code of every .proto under sdk/proto into OUT (default:
# in place). Needs protoc (Debian's protobuf-compiler, libprotoc 3.21) and
# protoc-gen-go v1.36.12 + protoc-gen-go-grpc v1.6.2 on PATH or in $(go env GOPATH)/bin.
set -euo pipefail
cd "$(dirname "$0")"
out="${1:-.}"
export PATH="$(go env GOPATH)/bin:$PATH"
mkdir -p "$out"
for f in $(find . -name '*.proto' | sort); do
  protoc -I . --go_out="$out" --go_opt=paths=source_relative \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative "$f"
done
