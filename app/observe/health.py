"""The store's state as the log sees it: an outage is logged once when it starts and once when
it ends, not a traceback per request (a 5-minute HBase outage logged 19,645 of them)."""

from __future__ import annotations

import logging
import threading
import time

from app.observe import metrics

LOG = logging.getLogger("app.store")


class StoreHealth:
    """Whether the last store access of this process failed, and since when."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failing_since_s: float | None = None
        self.failures = 0  # during the current outage

    def failed(self, message: str, exc: BaseException | None = None) -> None:
        """A store access failed; logs (with the cause) only when the store was fine."""
        metrics.STORE_ERRORS.inc()
        with self._lock:
            self.failures += 1
            if self.failing_since_s is not None:
                return
            self.failing_since_s = time.time()
        LOG.error("The store is failing: %s (logged once until it recovers)", message,
                  exc_info=exc)

    def succeeded(self) -> None:
        """A store access succeeded; logs the end of an outage."""
        if self.failing_since_s is None:  # the usual case, without the lock
            return
        with self._lock:
            since, failures = self.failing_since_s, self.failures
            self.failing_since_s, self.failures = None, 0
        if since is not None:
            LOG.warning("The store recovered after %.1f s and %d failed requests",
                        time.time() - since, failures)


STORE_HEALTH = StoreHealth()
