#!/usr/bin/env bash
# How long `npm start` takes to its banner ("msgbridge dev is running"), on a tree already built:
# runs the command in a process group of its own, prints the milliseconds to the banner, then
# stops the whole group (Ctrl-C's SIGINT, as a user would). docs/benchmarks.md, "npm start".
#   bench/start-banner.sh [COMMAND...]     default: npm start
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- npm start
log=$(mktemp)
trap 'rm -f "$log"' EXIT
started=$(date +%s%N)
setsid "$@" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  grep -q 'msgbridge dev is running' "$log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "start-banner: $* ended before its banner" >&2; exit 1; }
  sleep 0.05
done
elapsed=$((($(date +%s%N) - started) / 1000000))
kill -INT -- "-$pid" 2>/dev/null || true
for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
kill -KILL -- "-$pid" 2>/dev/null || true
grep -q 'msgbridge dev is running' "$log" || { echo "start-banner: no banner within 150 s" >&2; exit 1; }
echo "banner after ${elapsed} ms"
