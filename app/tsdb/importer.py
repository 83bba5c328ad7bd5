"""Bulk import of OpenTSDB's text format: ``metric timestamp value tagk=tagv ...`` per line.

The one write path, as ``/api/put`` and the line protocol's ``put`` take it: each line is
parsed by the line protocol's parser (``app.lineproto.parse``: OpenTSDB's checks and
messages) into a :class:`PointBatch`, and each batch goes to ``PointWriter.write_batch``, so
the write filter and real-time publisher plugins see imported points too (unless the import
asks to skip them: ``pytsd import --no-plugins``). A batch's points of one hour row are
written as one compacted column, the bytes compaction would produce, so a million points
cost a few thousand storage rows instead of a million.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.errors import BadRequestError, NoSuchUniqueName, TsdbError
from app.lineproto.parse import PutParser
from app.tsdb.points import PointBatch
from app.tsdb.writer import PointWriter

BATCH_POINTS = 50_000
LINE_FORMAT = "expected: metric timestamp value tagk=tagv [tagk=tagv ...]"
NO_PUT = ("OpenTSDB's import format has no 'put': "
          "metric timestamp value tagk=tagv [tagk=tagv ...] (drop the leading 'put')")


@dataclass
class Refused:
    """A line the import did not store, and why."""

    number: int
    line: str
    error: TsdbError


@dataclass
class Importer:
    """Collects lines into a batch; :meth:`flush` writes it (the caller flushes whenever
    ``pending`` reaches ``BATCH_POINTS``)."""

    writer: PointWriter
    parser: PutParser = field(default_factory=PutParser)
    batch: PointBatch = field(default_factory=PointBatch)
    lines: list[tuple[int, str]] = field(default_factory=list)
    stored: int = 0  # points written so far

    @property
    def pending(self) -> int:
        return len(self.batch)

    def add(self, line: str, number: int = 0) -> None:
        """Parse one line into the batch; raise :class:`TsdbError` when it is malformed
        (an error the store decides, such as an unknown metric, comes from :meth:`flush`)."""
        text = line.strip()
        if text == "put" or text.startswith(("put ", "put\t")):
            raise BadRequestError(NO_PUT)
        batch = self.batch
        # The line protocol's parser, fast for a series seen before in the same spelling.
        self.parser.add_line(b"put " + text.encode("utf-8", "surrogateescape"), batch)
        error = batch.errors[-1]
        if error is not None:
            for column in (batch.errors, batch.series_of, batch.timestamps, batch.values):
                column.pop()  # reported now, not kept in the batch
            raise BadRequestError(LINE_FORMAT) if len(text.split()) < 4 else error
        self.lines.append((number, line))

    def flush(self) -> list[Refused]:
        """Write the batch (counted in ``stored``); the lines refused, with their reason."""
        batch, lines = self.batch, self.lines
        self.batch, self.lines = PointBatch(), []
        if not len(batch):
            return []
        self.stored += self.writer.write_batch(batch, compact_rows=True)
        return [Refused(number, line, _named(error))
                for (number, line), error in zip(lines, batch.errors) if error is not None]


def _named(error: TsdbError) -> TsdbError:
    """OpenTSDB's import says ``Unknown metric`` where the put path names the UID kind."""
    if isinstance(error, NoSuchUniqueName):
        label = {"metrics": "metric"}.get(error.kind, error.kind)
        return BadRequestError(f"Unknown {label}")
    return error
