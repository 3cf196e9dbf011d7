#!/usr/bin/env bash
# Builds the validators the deploy tests run, from the Go module proxy (no Docker, no download of a
# prebuilt binary), pinned. Idempotent: a binary already built is kept.
# - the real `docker compose` CLI (the Compose v2 Go module) into .cache/bin, so that the tests
#   validate docker-compose.yml with `docker compose config`;
# - helm into ~/.cache/msgbridge/helm-<version>/ (MSGBRIDGE_CACHE_DIR or XDG_CACHE_HOME move it, as
#   for the Kafka jars), so that the tests lint and render deploy/helm/msgbridge.
set -euo pipefail
cd "$(dirname "$0")/.."
compose_version=v2.32.4
# test/deploy/manifests.test.ts reads this line to find the binary.
helm_version=v3.19.0

if ! command -v go >/dev/null 2>&1; then
  echo "install-validators: Go is not installed; docker-compose.yml will be checked with the JSON schema only, the Helm chart not at all" >&2
  exit 0
fi

bin=.cache/bin/docker-compose
if ! { [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q .; }; then
  mkdir -p .cache/bin
  GOBIN="$PWD/.cache/bin" GOFLAGS=-mod=mod go install "github.com/docker/compose/v2/cmd@$compose_version"
  mv .cache/bin/cmd "$bin"
fi
"$bin" version

helm_dir="${MSGBRIDGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/msgbridge}/helm-$helm_version"
if ! { [ -x "$helm_dir/helm" ] && "$helm_dir/helm" version --short >/dev/null 2>&1; }; then
  mkdir -p "$helm_dir"
  GOBIN="$helm_dir" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$helm_version"
fi
"$helm_dir/helm" version --short
