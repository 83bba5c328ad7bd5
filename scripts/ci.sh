#!/usr/bin/env bash
# CI: everything from a fresh clone. HBase must start: its tests may never be skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
make install-test
make lint
make typecheck
make hbase-up
trap 'make hbase-down || true' EXIT
export TSD_TEST_HBASE="127.0.0.1:${HBASE_THRIFT_PORT:-9090}"
make test
