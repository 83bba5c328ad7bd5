#!/usr/bin/env bash
# Run every benchmark in bench/ and print its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
for script in bench/bench_*.py; do
  echo "== $script"
  python3 "$script"
done
