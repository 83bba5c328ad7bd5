"""What a read through the hour cache keeps: the decodes of the closed, settled rows it read
from storage, as views of one block (a cold pass's arrays, or one copy), and the decode of
a pass that mixes kept and stored rows (``Keeper.decode``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from app.storage import codec
from app.storage.base import Row
from app.tsdb import hour_cache
from app.tsdb.hour_cache import SETTLED_MS, CachedRow, HourCache, Stamp, keepable, settles_at_ms
from app.tsdb.read.decode import (
    concatenated,
    decode_pass,
    has_notes,
    joined,
    sliced,
    stored_bytes,
)
from app.tsdb.read.keys import SeriesRows, base_time_s

# A cold pass's arrays are kept as they are when at least 3/4 of their points are kept.
SHARED_BLOCK_SHARE = 4

DecodeRow = Callable[[bytes, Row], codec.DecodedRow]


class Keeper:
    """One read's link to the hour cache: the stamps and weights of the rows it read from
    storage, and what it keeps of them."""

    def __init__(self, cache: HourCache, table_name: str, layout: codec.RowKeyLayout,
                 span_s: int) -> None:
        self.cache = cache
        self.table_name = table_name
        self.layout = layout
        self.span_s = span_s
        self.stamps: dict[bytes, Stamp] = {}  # of the rows read from storage, to keep them
        self.weights: dict[bytes, int] = {}  # their stored bytes

    def weight(self, key: bytes, cells: Row) -> int:
        """A stored row's weight for the byte limit (known already when read in one pass)."""
        weight = self.weights.get(key)
        if weight is None:
            weight = self.weights[key] = stored_bytes(key, cells)
        return weight

    def settling_soon(self, now_ms: int) -> tuple[int, int]:
        """Of the rows read from storage, how many are not keepable yet but will be within
        ``SETTLED_MS`` (a closed hour's rows just rewritten), and when the last of them is."""
        stamps = self.stamps
        if not stamps or max(newest for _, newest in stamps.values()) + SETTLED_MS <= now_ms:
            return 0, 0  # every row settled (the common case: no step per row)
        soon = [at for at in (settles_at_ms(base_time_s(self.layout, key), self.span_s, stamp)
                              for key, stamp in stamps.items())
                if now_ms < at <= now_ms + SETTLED_MS]
        return len(soon), max(soon, default=0)

    def decode(self, groups: Sequence[SeriesRows], decode_row: DecodeRow
               ) -> list[codec.DecodedRow]:
        """Each row's points from the cache or one vectorised pass over the others, joined
        per series; the closed rows read from storage are then kept."""
        rows = [row for group in groups for row in group.rows]
        stored = [(key, cells) for key, cells in rows if not isinstance(cells, CachedRow)]
        parts, starts, merged, refused = self._decode_fresh(stored, decode_row)
        sizes = [len(group.rows) for group in groups]
        if merged is not None and len(stored) == len(rows):
            # A cold pass: the series lie in order in the pass's arrays, which the cache
            # may keep as they are (no copy).
            out = sliced(merged, parts, sizes)
            _release(groups, self._keep_pass(stored, parts, starts, merged, refused))
            return out
        fresh = iter(parts)
        decoded = [(cells.decoded, cells) if isinstance(cells, CachedRow) else (next(fresh), None)
                   for _, cells in rows]
        out = joined(decoded, sizes)
        if refused != set(range(len(stored))):
            self._keep_rows(rows, [d for d, _ in decoded], refused)
        return out

    def _decode_fresh(self, rows: Sequence[tuple[bytes, Row]], decode_row: DecodeRow
                      ) -> tuple[list[codec.DecodedRow], list[int], codec.DecodedRow | None,
                                 set[int]]:
        """Rows read from storage decoded in one pass: each row's points (read-only views of
        the pass's arrays, returned too, with where each row starts in them, unless
        duplicates made rows decode one by one), and the rows not to keep (integers beyond
        2**53 need their cells again)."""
        done = decode_pass(rows, self.layout.salt_width + self.layout.metric_width)
        if done is None:
            return [], [], None, set()
        merged, cuts, big = done
        if merged.has_duplicates:  # rare: decode row by row, keep none
            return ([decode_row(key, cells) for key, cells in rows], [], None,
                    set(range(len(rows))))
        starts = [0, *cuts.tolist()]
        parts = [codec.DecodedRow(merged.ts_ms[a:b], merged.values[a:b], merged.is_int[a:b])
                 for a, b in zip(starts, [*starts[1:], merged.ts_ms.size])]
        return parts, starts, merged, set(np.searchsorted(cuts, big, side="right").tolist())

    def _keep_pass(self, stored: Sequence[tuple[bytes, Row]], parts: Sequence[codec.DecodedRow],
                   starts: Sequence[int], merged: codec.DecodedRow, refused: set[int]
                   ) -> dict[bytes, CachedRow]:
        """Keep the closed, settled rows of a cold pass as views of the pass's arrays, one
        block for all, when they are nearly all of it (else each series' rows are copied);
        the entries kept, by row key."""
        wanted = self._keepable_rows(stored, refused)
        sizes = np.diff(np.array([*starts, len(merged)], dtype=np.int64))
        kept_points = int(sizes[wanted].sum())
        if kept_points * SHARED_BLOCK_SHARE < len(merged) * (SHARED_BLOCK_SHARE - 1):
            return self._keep_copies(stored, parts, wanted)
        block = hour_cache.Block(merged)
        entries = [(stored[j][0], CachedRow(self.stamps[stored[j][0]], parts[j],
                                            self.weights[stored[j][0]], block, starts[j]))
                   for j in wanted]
        self.cache.put_many(self.table_name, entries)
        return dict(entries)

    def _keep_copies(self, stored: Sequence[tuple[bytes, Row]],
                     parts: Sequence[codec.DecodedRow], wanted: Sequence[int]
                     ) -> dict[bytes, CachedRow]:
        """Keep ``wanted`` rows as views of one copy of their points (a view of the pass's
        arrays would keep the whole pass alive)."""
        if not wanted:
            return {}
        block = concatenated([parts[j] for j in wanted])
        for array in (block.ts_ms, block.values, block.is_int):
            array.flags.writeable = False
        owner = hour_cache.Block(block)
        entries, at = [], 0
        for j in wanted:
            end = at + len(parts[j])
            key = stored[j][0]
            view = codec.DecodedRow(block.ts_ms[at:end], block.values[at:end],
                                    block.is_int[at:end])
            entries.append((key, CachedRow(self.stamps[key], view, self.weights[key], owner,
                                           at)))
            at = end
        self.cache.put_many(self.table_name, entries)
        return dict(entries)

    def _keep_rows(self, rows: Sequence[tuple[bytes, Row | CachedRow]],
                   decoded: Sequence[codec.DecodedRow], refused: set[int]) -> None:
        """Keep the decodes of the closed, settled rows read from storage in a warm pass
        (not those with notes: their cells are needed), each series' kept rows in one copy."""
        stored: list[tuple[bytes, Row]] = []
        parts: list[codec.DecodedRow] = []
        for (key, cells), part in zip(rows, decoded, strict=True):
            if not isinstance(cells, CachedRow):
                stored.append((key, cells))
                parts.append(part)
        self._keep_copies(stored, parts, self._keepable_rows(stored, refused))

    def _keepable_rows(self, stored: Sequence[tuple[bytes, Row]], refused: set[int]) -> list[int]:
        """Which rows read from storage may be kept (not ``refused``): those whose stamp was
        read, closed and settled, without notes (their cells are needed). No call per row: a
        cold read asks for ~24,000 rows at once."""
        now_ms = hour_cache.clock_ms()
        stamps, span_s, layout = self.stamps, self.span_s, self.layout
        wanted = []
        for j, (key, cells) in enumerate(stored):
            stamp = stamps.get(key)
            if (stamp is None or j in refused
                    or not keepable(base_time_s(layout, key), span_s, stamp, now_ms)):
                continue
            # A note's qualifier is 3 or 5 bytes: only odd ones (none: no step per cell).
            if has_notes(cells) and any(len(column) & 1 and codec.is_annotation_qualifier(
                    column[2:]) for column in cells):
                continue
            wanted.append(j)
        return wanted


def _release(groups: Sequence[SeriesRows], kept: dict[bytes, CachedRow]) -> None:
    """Each kept row's cells replaced by its kept entry, so the cells (~8 bytes per point)
    are freed now, not when the whole read is done; a kept row has no note and no integer
    beyond 2**53, so nothing after the decode needs its cells."""
    if kept:
        for group in groups:
            group.rows = [(key, kept.get(key, cells)) for key, cells in group.rows]
