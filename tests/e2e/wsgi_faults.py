"""A WSGI app for the server tests: pytsd's, plus paths that misbehave the ways apps can.

``/test/crash`` raises, ``/test/bad-header`` sends a header value with a line break,
``/test/sleep?s=N`` blocks its thread for N seconds, ``/test/hold-expensive-lane?s=N`` holds
the worker's expensive query lane (app/tsdb/admission.py) for N seconds, as a running expensive
query would; everything else is pytsd.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from app.wsgi import application as tsd_application


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/test/crash":
        raise RuntimeError("the app crashed")
    if path == "/test/bad-header":
        start_response("200 OK", [("X-Bad", "a\r\nInjected: yes")])
        return [b"never"]
    if path == "/test/sleep":
        seconds = float(environ["QUERY_STRING"].partition("=")[2])
        time.sleep(seconds)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"slept %g" % seconds]
    if path == "/test/hold-expensive-lane":
        from app.tsdb.admission import admission_for

        seconds = float(environ["QUERY_STRING"].partition("=")[2])
        lane = admission_for(tsd_application.extensions["tsdb"]).lanes["expensive"]
        assert lane.enter(seconds)
        try:
            time.sleep(seconds)
        finally:
            lane.leave()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"held %g" % seconds]
    return tsd_application(environ, start_response)
