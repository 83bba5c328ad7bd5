"""Built-in real-time publishers (OpenTSDB's ``RTPublisher``): ``webhook`` and ``jsonl``.

Enable with ``tsd.rtpublisher.enable = true`` and ``tsd.rtpublisher.plugin = webhook``
(or ``jsonl``, or both, comma-separated). Both see every point a request stored and every
annotation created or changed, after it is stored.

* ``webhook`` queues points (bounded: ``tsd.rtpublisher.webhook.queue_size`` per worker) and
  a background thread POSTs them in batches, as ``/api/put`` takes them, to
  ``tsd.rtpublisher.webhook.url`` (so another TSD can be the receiver), retrying a failed POST
  with exponential backoff. Points that do not fit in the queue, or whose POST still fails
  after the retries, are dropped and counted (``tsd.rtpublisher.webhook.dropped`` in
  ``/api/stats``): publishing never slows down or fails a write.
* ``jsonl`` appends one JSON line per point (``"type": "point"``) and per annotation
  (``"type": "annotation"``) to ``tsd.rtpublisher.jsonl.path``, one ``write`` per batch on an
  ``O_APPEND`` file, so the lines of several workers never interleave.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import requests

from plugin.spec import Point, hookimpl, point_json

log = logging.getLogger(__name__)
BACKOFF_S = 0.2


class WebhookPublisher:
    """The ``webhook`` plugin."""

    def __init__(self) -> None:
        self.url = ""
        self.annotation_url = ""
        self.batch_size = 500
        self.flush_interval_s = 1.0
        self.queue_size = 100_000
        self.retries = 3
        self.timeout_s = 5.0
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stopping = False
        self._sending = 0  # items popped but not yet sent or dropped
        self.sent = 0
        self.dropped = 0
        self.failed_posts = 0

    @hookimpl
    def pytsd_configure(self, config: Mapping[str, Any]) -> None:
        self.url = config.get("tsd.rtpublisher.webhook.url") or ""
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("tsd.rtpublisher.webhook.url must be an http(s) URL")
        self.annotation_url = config.get("tsd.rtpublisher.webhook.annotation_url") or ""
        self.batch_size = max(1, int(config.get("tsd.rtpublisher.webhook.batch_size", 500)))
        self.flush_interval_s = int(
            config.get("tsd.rtpublisher.webhook.flush_interval_ms", 1000)) / 1000
        self.queue_size = max(1, int(config.get("tsd.rtpublisher.webhook.queue_size", 100000)))
        self.retries = max(0, int(config.get("tsd.rtpublisher.webhook.retries", 3)))
        self.timeout_s = float(config.get("tsd.rtpublisher.webhook.timeout_s", 5.0))

    @hookimpl
    def pytsd_publish_points(self, points: Sequence[Point]) -> None:
        self._enqueue([("point", point_json(p)) for p in points])

    @hookimpl
    def pytsd_publish_annotation(self, annotation: Mapping[str, Any]) -> None:
        if self.annotation_url:
            self._enqueue([("annotation", dict(annotation))])

    @hookimpl
    def pytsd_collect_stats(self) -> list[tuple[str, int, Mapping[str, str]]]:
        tags = {"plugin": "webhook"}
        return [("tsd.rtpublisher.webhook.sent", self.sent, tags),
                ("tsd.rtpublisher.webhook.dropped", self.dropped, tags),
                ("tsd.rtpublisher.webhook.queued", len(self._queue), tags),
                ("tsd.rtpublisher.webhook.failed_posts", self.failed_posts, tags)]

    @hookimpl
    def pytsd_shutdown(self) -> None:
        self.flush(timeout_s=self.timeout_s)
        with self._wake:
            self._stopping = True
            self._wake.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait until the queue is sent (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._wake:
            self._wake.notify_all()
            while self._queue or self._sending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wake.wait(remaining)
        return True

    def _enqueue(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        self._ensure_thread()
        with self._wake:
            room = self.queue_size - len(self._queue)
            if room < len(items):
                self.dropped += len(items) - max(room, 0)
                items = items[:max(room, 0)]
            self._queue.extend(items)
            if len(self._queue) >= self.batch_size:
                self._wake.notify_all()

    def _ensure_thread(self) -> None:
        # Started on first use in each process: gunicorn forks workers after create_app.
        if self._thread is not None and self._pid == os.getpid():
            return
        with self._wake:
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._queue.clear()
                self._thread = threading.Thread(target=self._run, name="tsd-webhook",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._queue and not self._stopping:
                    self._wake.wait(self.flush_interval_s)
                if len(self._queue) < self.batch_size and not self._stopping:
                    self._wake.wait(self.flush_interval_s)
                if self._stopping and not self._queue:
                    return
                batch = [self._queue.popleft()
                         for _ in range(min(self.batch_size, len(self._queue)))]
                self._sending = len(batch)
            try:
                self._send(batch)
            finally:
                with self._wake:
                    self._sending = 0
                    self._wake.notify_all()

    def _send(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        points = [item for kind, item in batch if kind == "point"]
        notes = [item for kind, item in batch if kind == "annotation"]
        for url, body in ((self.url, points), (self.annotation_url, notes)):
            if body:
                if self._post(url, body):
                    self.sent += len(body)
                else:
                    self.dropped += len(body)

    def _post(self, url: str, body: list[dict[str, Any]]) -> bool:
        for attempt in range(self.retries + 1):
            try:
                response = requests.post(url, json=body, timeout=self.timeout_s)
                if response.status_code < 300:
                    return True
                problem = f"HTTP {response.status_code}"
            except requests.RequestException as exc:
                problem = str(exc)
            self.failed_posts += 1
            log.warning("webhook POST to %s failed (attempt %d): %s", url, attempt + 1, problem)
            if attempt < self.retries:
                time.sleep(BACKOFF_S * 2 ** attempt)
        return False


class JsonLinesPublisher:
    """The ``jsonl`` plugin."""

    def __init__(self) -> None:
        self.path = ""
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self.written = 0

    @hookimpl
    def pytsd_configure(self, config: Mapping[str, Any]) -> None:
        self.path = config.get("tsd.rtpublisher.jsonl.path") or ""
        if not self.path:
            raise ValueError("tsd.rtpublisher.jsonl.path is empty")
        self._open()  # fail at start when the file cannot be written

    @hookimpl
    def pytsd_publish_points(self, points: Sequence[Point]) -> None:
        self._write([{"type": "point", **point_json(p)} for p in points])

    @hookimpl
    def pytsd_publish_annotation(self, annotation: Mapping[str, Any]) -> None:
        self._write([{"type": "annotation", **annotation}])

    @hookimpl
    def pytsd_collect_stats(self) -> list[tuple[str, int, Mapping[str, str]]]:
        return [("tsd.rtpublisher.jsonl.written", self.written, {"plugin": "jsonl"})]

    @hookimpl
    def pytsd_shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            self._pid = os.getpid()
        return self._fd

    def _write(self, items: list[dict[str, Any]]) -> None:
        if not items:
            return
        data = "".join(json.dumps(item, separators=(",", ":")) + "\n" for item in items)
        with self._lock:
            os.write(self._open(), data.encode("utf-8"))
            self.written += len(items)
