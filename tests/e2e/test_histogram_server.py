"""Histograms through a real gunicorn server: ``POST /api/histogram`` with ``requests``, the
telnet ``histogram`` command on the same port, then a ``percentiles`` query over both."""

from __future__ import annotations

from pathlib import Path

import requests

from tests.e2e.tsd_process import read_exactly_until, start_tsd

T0 = 1356998400


def test_histograms_written_over_http_and_telnet_are_queried(tmp_path: Path) -> None:
    tsd = start_tsd(tmp_path, {"tsd.core.histograms.config":
                               '{"net.opentsdb.core.SimpleHistogramDecoder": 0}',
                               "tsd.core.auto_create_metrics": "true"})
    try:
        response = requests.post(f"{tsd.url}/api/histogram?summary", timeout=10, json=[
            {"metric": "h.lat", "timestamp": T0, "tags": {"host": "a"},
             "buckets": {"0,1": 5, "1,5": 10, "5,10": 1}},
            {"metric": "h.lat", "timestamp": T0, "tags": {"host": "a"}, "buckets": {}}])
        assert response.status_code == 400
        assert response.json() == {"success": 1, "failed": 1}
        with tsd.connect() as sock:
            sock.sendall(f"histogram h.lat {T0 + 60} 0,1=1:1,5=1:5,10=10 host=b\n"
                         f"histogram h.lat {T0 + 60} 0,1=1 host=b x\nversion\n".encode())
            reply = read_exactly_until(sock, b"built at")
        assert reply.startswith(b"histogram: illegal argument: invalid tag: x\n")
        answer = requests.get(f"{tsd.url}/api/query?start={T0}&end={T0 + 600}"
                              "&m=sum:percentiles[50]:h.lat{host=*}", timeout=10)
        assert answer.status_code == 200
        assert [(s["metric"], s["tags"], s["dps"]) for s in answer.json()] == [
            ("h.lat_pct_50.0", {"host": "a"}, {str(T0): 3.0}),
            ("h.lat_pct_50.0", {"host": "b"}, {str(T0 + 60): 7.5})]
    finally:
        tsd.stop()
