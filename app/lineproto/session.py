"""One line-protocol connection's commands (``RpcManager``'s telnet commands).

The contract with the server: the server reads a block of bytes, splits it into complete
lines (``\\n`` terminated; a trailing ``\\r`` removed; each at most the framing limit), and
calls :meth:`TelnetSession.handle_lines` from a worker thread, one call at a time per
connection, before it reads the next block (that is the back-pressure). The answer is the
bytes to write back, in order, and whether the connection must be closed afterwards.

Durability: the ``put`` lines of a block are stored before ``handle_lines`` returns, so
before the server reads more from the connection; a crash loses at most the block being
handled, and never a point whose line was followed by another command's answer.
Successful puts answer nothing; a bad line answers one error line and the connection stays
open, with the good lines around it stored.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable
from typing import Any

from app.api.meta import drop_caches, version_info
from app.api.put import writer_of
from app.api.stats import collect, record_points_written
from app.errors import NoSuchUniqueName, StorageError, TsdbError
from app.lineproto.parse import InvalidValue, PutParser
from app.observe.health import STORE_HEALTH
from app.tsdb.points import PointBatch
from plugin.telnet import TelnetGate

WRITE_COMMANDS = ("put", "rollup", "histogram")
# Not served in tsd.mode=ro either (as over HTTP, app/api/mode.py): dropping caches is an
# admin action, and a read-only TSD offers none.
RO_REFUSED = (*WRITE_COMMANDS, "dropcaches")
# RpcManager registers them in this order, which `help` lists (diediedie is left out).
COMMANDS = ("stats", "dropcaches", "version", "exit", "help", *WRITE_COMMANDS)


class TelnetSession:
    """The commands of one connection."""

    def __init__(self, app: Any, peer: str) -> None:
        self.app = app
        self.peer = peer
        self.parser = PutParser()
        self.gate = TelnetGate(app.extensions["tsdb"].plugins)
        writes = app.config["TSD"]["tsd.mode"] != "ro"
        self.commands = [c for c in COMMANDS if writes or c not in RO_REFUSED]
        self._handlers: dict[str, Callable[[list[str]], str]] = {
            "stats": self._stats, "dropcaches": self._dropcaches, "version": self._version,
            "help": self._help, "rollup": self._not_supported,
            "histogram": self._histogram}

    def handle_lines(self, lines: list[bytes]) -> tuple[bytes, bool]:
        """Execute ``lines`` in order; return the reply bytes and whether to close.

        Consecutive ``put`` lines are stored together; any other command first stores
        the puts before it, so answers and effects keep the order of the lines.
        """
        replies: list[str] = []
        batch: PointBatch | None = None
        plain_puts = "put" in self.commands and not self.gate.required
        puts: list[bytes] = []  # raw put lines not yet parsed: parsed together, in order
        for line in lines:
            if plain_puts and line.startswith(b"put "):  # the common line: no words needed
                puts.append(line)
                continue
            if puts:
                batch = batch if batch is not None else PointBatch()
                self.parser.add_lines(puts, batch)
                puts = []
            words = line.decode("utf-8", "replace").split()
            if not words:
                continue  # OpenTSDB answers an empty line "unknown command: ."
            refusal = self.gate.admit(words)  # authentication (plugin/telnet.py)
            if refusal is not None:
                replies += self._store(batch) if batch is not None else []
                batch = None
                replies.append(refusal)
                continue
            command = words[0] if words[0] in self.commands else None
            if command == "put":
                batch = batch if batch is not None else PointBatch()
                self.parser.add(words, batch)
                continue
            if batch is not None:
                replies += self._store(batch)
                batch = None
            if command == "exit":
                return "".join(replies).encode(), True
            handler = self._handlers.get(command or "", self._unknown)
            replies.append(handler(words))
        if puts:
            batch = batch if batch is not None else PointBatch()
            self.parser.add_lines(puts, batch)
        if batch is not None:
            replies += self._store(batch)
        return "".join(replies).encode(), False

    def _store(self, batch: PointBatch) -> list[str]:
        """Write the batch's good points; one error line per bad one, in line order."""
        try:
            record_points_written(writer_of(self.app.extensions).write_batch(batch))
            STORE_HEALTH.succeeded()
        except StorageError as exc:
            STORE_HEALTH.failed(f"line-protocol put from {self.peer}: {exc.message}", exc)
            return [_put_error(error) if error is not None else f"put: HBase error: {exc.message}\n"
                    for error in batch.errors]
        return [_put_error(error) for error in batch.errors if error is not None]

    def _unknown(self, words: list[str]) -> str:
        # Echoed whole, as OpenTSDB does: the server's framing bounds a line (1024 bytes).
        return f"unknown command: {words[0]}.  Try `help'.\n"

    def _help(self, words: list[str]) -> str:
        return "available commands: " + "".join(f"{c} " for c in self.commands) + "\n"

    def _version(self, words: list[str]) -> str:
        return version_text()

    def _stats(self, words: list[str]) -> str:
        """``tsd.x timestamp value tagk=tagv ...`` per line, as OpenTSDB's ASCIICollector."""
        return "".join(
            f"{p['metric']} {p['timestamp']} {p['value']} "
            + " ".join(f"{k}={v}" for k, v in p["tags"].items()) + "\n"
            for p in collect(self.app.extensions["tsdb"]))

    def _dropcaches(self, words: list[str]) -> str:
        drop_caches(self.app.extensions)
        return "Caches dropped.\n"

    def _histogram(self, words: list[str]) -> str:
        """``histogram`` lines are stored one by one, each answering only its error."""
        from app.tsdb.histograms import StoreFailed, parse_telnet_histogram, write_histograms

        tsdb = self.app.extensions["tsdb"]
        try:
            point = parse_telnet_histogram(words, tsdb.histogram_codecs)
            error = write_histograms(writer_of(self.app.extensions), [point])[0]
        except StoreFailed as exc:
            error = exc
        except StorageError as exc:
            return f"histogram: HBase error: {exc.message}\n"
        except TsdbError as exc:
            return _put_error(exc).replace("put:", "histogram:", 1)
        if error is not None:
            # OpenTSDB fails the write's callback: any cause reads as an HBase error.
            return f"histogram: HBase error: {error.message}\n"
        record_points_written(1)
        return ""

    def _not_supported(self, words: list[str]) -> str:
        return (f"{words[0]}: illegal argument: {words[0]} data points are not supported "
                "by pytsd (use put)\n")


@functools.cache
def version_text() -> str:
    """The ``version`` answer (the same for the process's life: collectors ask it often)."""
    info = version_info()
    built = datetime.datetime.fromtimestamp(int(info["timestamp"]), datetime.UTC)
    return (f"{info['repo']} {info['version']} built at revision {info['short_revision']} "
            f"({info['repo_status']})\nBuilt on {built:%Y/%m/%d %H:%M:%S %z} by "
            f"{info['user']}@{info['host']}:{info['repo']}\n")


def _put_error(error: TsdbError) -> str:
    """``PutDataPointRpc``'s error line for one rejected ``put``."""
    if isinstance(error, NoSuchUniqueName):
        return f"put: unknown metric: {error.message}\n"
    if isinstance(error, InvalidValue):
        return f"put: invalid value: {error.message}\n"
    return f"put: illegal argument: {error.message}\n"
