#!/usr/bin/env bash
# Build VictoriaMetrics (single-node) from the Go module proxy into bench/.peer/ (gitignored),
# for the optional side-by-side run in bench/bench_peer.py. Needs Go >= 1.24. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="${VM_VERSION:-v1.151.0}"
OUT="$PWD/.peer"
mkdir -p "$OUT"
if [[ -x "$OUT/victoria-metrics" && "$("$OUT/victoria-metrics" -version 2>/dev/null)" == *"$VERSION"* ]]; then
  echo "victoria-metrics $VERSION already built: $OUT/victoria-metrics"
  exit 0
fi
# The module's go.mod is at the repository root; its app/victoria-metrics package is the binary.
# `go install pkg@version` needs no local module and honours the module's own replace-free go.mod.
GOBIN="$OUT" GOFLAGS="-trimpath" CGO_ENABLED=0 \
  nice go install "github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$VERSION"
echo "built: $OUT/victoria-metrics"
