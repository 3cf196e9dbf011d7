#!/usr/bin/env bash
# Builds the real `docker compose` CLI (the Compose v2 Go module, from the Go module proxy) into
# .cache/bin, so that the tests validate docker-compose.yml with `docker compose config` even on
# a machine with no Docker installed. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
version=v2.32.4
bin=.cache/bin/docker-compose
if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q .; then exit 0; fi
if ! command -v go >/dev/null 2>&1; then
  echo "install-validators: Go is not installed; docker-compose.yml will be checked with the JSON schema only" >&2
  exit 0
fi
mkdir -p .cache/bin
GOBIN="$PWD/.cache/bin" GOFLAGS=-mod=mod go install "github.com/docker/compose/v2/cmd@$version"
mv .cache/bin/cmd "$bin"
"$bin" version
