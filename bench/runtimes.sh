#!/usr/bin/env bash
# The ingress and the sender on this machine's Node (20 on Debian 12 here, the Node 20 uWS build)
# and on the production runtime's (Node 24 in the Debian 13 root, the official 20.57 build, the
# image's node flags: .ci/root-node), same machine, same run, alternated. docs/benchmarks.md,
# "Node 20 and Node 24".
#   bench/runtimes.sh [ROUNDS]     default 3
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
root=.ci/root-node
echo "== ingress: $(node --version) here and $($root --version) in the root, modes interleaved per round"
npx tsx bench/ingress.ts --rounds "$rounds" --duration-ms 8000 --warmup-ms 4000 \
  --modes "discard,discard@BENCH_TARGET_NODE=$root,platformatic,platformatic@BENCH_TARGET_NODE=$root"
for round in $(seq 1 "$rounds"); do
  echo "== sender, round $round: $(node --version) here"
  npx tsx bench/sender-throughput.ts --targets msgbridge --in-flight 128,512 --rounds 1
  echo "== sender, round $round: $($root --version) in the root"
  BENCH_TARGET_NODE=$root npx tsx bench/sender-throughput.ts --targets msgbridge --in-flight 128,512 --rounds 1
done
