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
# The reference OpenTSDB 2.4.1 on fresh tables: tests/differential compares pytsd with it.
OPENTSDB_FRESH=1 make oracle-up
trap 'make oracle-down || true; make hbase-down || true' EXIT
export TSD_TEST_HBASE="127.0.0.1:${HBASE_THRIFT_PORT:-9090}"
export TSD_TEST_OPENTSDB="127.0.0.1:${OPENTSDB_PORT:-4243}"
make test
