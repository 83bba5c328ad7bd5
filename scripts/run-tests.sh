#!/usr/bin/env bash
# Run pytest; point the HBase tests at the project's HBase when it is up.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${TSD_TEST_HBASE:-}" ]] && scripts/hbase/hbase.sh status >/dev/null 2>&1; then
  export TSD_TEST_HBASE="127.0.0.1:${HBASE_THRIFT_PORT:-9090}"
fi
if ! python3 -c "import pytest" 2>/dev/null; then
  echo "pytest is not installed in .venv: run 'make install-test' first (the test and dev tools)" >&2
  exit 2
fi
echo "HBase tests: ${TSD_TEST_HBASE:-skipped (run 'make hbase-up' first)}"
exec python3 -m pytest "$@"
