#!/usr/bin/env bash
# Debian's collectd (collectd-core: the daemon and its plugins, write_tsdb among them) for the
# real-client tests, which start it as a process writing to pytsd's line protocol.
set -euo pipefail
if [[ -x /usr/sbin/collectd && -e /usr/lib/collectd/write_tsdb.so ]]; then exit 0; fi
if [[ $(id -u) -ne 0 ]] && ! command -v sudo >/dev/null; then
  echo "collectd missing and not root: the collectd tests will fail" >&2; exit 0
fi
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  collectd-core >/dev/null
