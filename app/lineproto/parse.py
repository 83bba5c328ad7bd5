"""Parsing ``put`` lines into a :class:`~app.tsdb.points.PointBatch` (pure: no IO, no Flask).

``put <metric> <timestamp> <value> <tagk=tagv> ...`` as ``PutDataPointRpc.importDataPoint``
reads it, in its order and with its messages: too few words, the timestamp (seconds or
milliseconds; dots are dropped, so ``1356998400.123`` is milliseconds), the tags
(``Tags.parse``), then the value (``Tags.parseLong`` when it has no ``.eE``, else a
double). Words are separated by any run of whitespace (OpenTSDB: exactly one space).
"""

from __future__ import annotations

import re

from app.errors import BadRequestError
from app.tsdb.points import PointBatch, TagPairs, Value, echo, java_hashmap_text

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
FAST_DIGITS = 18  # an unsigned run of at most 18 digits always fits a long
DOT = ord(".")
DOUBLE_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?")
# A column of plain decimal values joined by single spaces: each what add_lines takes inline
# (``value.removeprefix(b"-").replace(b".", b"", 1).isdigit()``).
# Each part matches one way (no backtracking across values: an odd value fails at once).
PLAIN_DECIMALS = re.compile(rb"-?(?:\d+(?:\.\d*)?|\.\d+)(?: -?(?:\d+(?:\.\d*)?|\.\d+))*")
# Lines parsed column by column at a time: their split words are alive together, and more
# than the garbage collector's threshold (700 new containers) would start a collection.
PLAIN_RUN_LINES = 250
MAX_CACHED_SERIES = 10_000  # per connection: hundreds of connections share a worker


class InvalidValue(BadRequestError):
    """Java's ``NumberFormatException``: OpenTSDB answers ``put: invalid value: ...``."""


def parse_long(text: str) -> int:
    """``Tags.parseLong``: an optionally signed run of ASCII digits that fits a long."""
    if not text:
        raise InvalidValue("Empty string")
    digits = text[1:] if text[0] in "+-" else text
    if text[0] in "+-" and not digits:
        raise InvalidValue(f"Just a sign, no value: {echo(text)}")
    if len(digits) > 19:
        raise InvalidValue(f"Value too long: {echo(text)}")
    for char in digits:
        if not "0" <= char <= "9":
            raise InvalidValue(f"Invalid character '{char}' in {echo(text)}")
    value = int(text)
    if not LONG_MIN <= value <= LONG_MAX:
        raise InvalidValue(f"Overflow in {echo(text)}")
    return value


def parse_double(text: str) -> float:
    """``Double.parseDouble`` of decimal text (Java's message when it is not a number)."""
    if not DOUBLE_TEXT.fullmatch(text):
        raise InvalidValue(f'For input string: "{echo(text)}"')
    return float(text.rstrip("fFdD"))


def parse_tags(words: list[str]) -> TagPairs:
    """``Tags.parse`` of each word: ``invalid tag`` / ``duplicate tag`` as OpenTSDB says."""
    tags: dict[str, str] = {}
    for word in words:
        tagk, sep, tagv = word.partition("=")
        if not sep or not tagk or not tagv or "=" in tagv:
            raise BadRequestError(f"invalid tag: {echo(word)}")
        if tags.get(tagk, tagv) != tagv:
            raise BadRequestError(f"duplicate tag: {echo(word)}, "
                                  f"tags={java_hashmap_text(tuple(tags.items()))}")
        tags[tagk] = tagv
    return tuple(tags.items())


def parse_value(text: str, metric: str, timestamp: int) -> Value:
    """A long when the text has no ``.eE`` (``Tags.looksLikeInteger``), else a double."""
    if "." in text or "e" in text or "E" in text:
        value = parse_double(text)
        if value in (float("inf"), float("-inf")):
            java = "Infinity" if value > 0 else "-Infinity"
            raise BadRequestError(f"value is NaN or Infinite: {java} for metric="
                                  f"{echo(metric)} timestamp={timestamp}")
        return value
    return parse_long(text)


class PutParser:
    """Parses ``put`` lines; remembers each series' parsed tags across blocks (bounded).

    :meth:`add_line` takes a raw line. A line of single-space separated words whose
    timestamp and value are plain digits, of a series seen before in that exact spelling
    (its metric and tag bytes), costs one dict lookup and two ``int`` calls; any other line
    is split into words and goes through :meth:`add`, with its checks and messages.
    """

    def __init__(self) -> None:
        self._tags: dict[str, TagPairs | BadRequestError] = {}
        # (metric bytes, tag bytes) of a plain line -> its batch key, and its metric and tags.
        self._known: dict[tuple[bytes, bytes],
                          tuple[str, tuple[str, TagPairs]]] = {}

    def add_lines(self, lines: list[bytes], batch: PointBatch) -> None:
        """:meth:`add_line` of each raw ``put`` line in turn, the common line (a known
        series, a digits-only timestamp, a plain decimal value) handled inline: no call and
        no attribute look-up per line; a run of such lines alone, column by column."""
        for start in range(0, len(lines), PLAIN_RUN_LINES):
            run = lines[start:start + PLAIN_RUN_LINES]
            if not self._add_plain_run(run, batch):
                self._add_each(run, batch)

    def _add_each(self, lines: list[bytes], batch: PointBatch) -> None:
        known_get = self._known.get
        series = batch.series
        series_of, timestamps = batch.series_of.append, batch.timestamps.append
        values, errors = batch.values.append, batch.errors.append
        for line in lines:
            fields = line.split(b" ", 4)
            if len(fields) == 5:
                known = known_get((fields[1], fields[4]))
                ts, value = fields[2], fields[3]
                # A plain decimal value (``-12``, ``0.25``): what parse_value makes of it
                # (a long without a dot, else a double), at most FAST_DIGITS characters.
                if known is not None and ts.isdigit() and len(ts) <= FAST_DIGITS \
                        and ts[0] != 48 and len(value) <= FAST_DIGITS \
                        and value.removeprefix(b"-").replace(b".", b"", 1).isdigit():
                    key = known[0]
                    if key not in series:
                        series[key] = known[1]
                    series_of(key)
                    timestamps(int(ts))
                    values(float(value) if DOT in value else int(value))
                    errors(None)
                    continue
            self.add_line(line, batch)

    def _add_plain_run(self, lines: list[bytes], batch: PointBatch) -> bool:
        """Add the points of ``lines`` when every one is the common line (what the loop of
        :meth:`_add_each` takes inline), each check and conversion made on a whole column by
        one C call (``zip``, ``join``, ``map``, a regular expression); False (nothing added)
        when some line is not."""
        try:
            _, metrics, stamps, numbers, tag_words = zip(*[line.split(b" ", 4) for line in lines])
        except ValueError:  # a line of fewer than five words (or no line)
            return False
        stamp_text, value_text = b" " + b" ".join(stamps), b" ".join(numbers)
        if not (stamp_text.replace(b" ", b"").isdigit() and b" 0" not in stamp_text
                and 0 < min(map(len, stamps)) and max(map(len, stamps)) <= FAST_DIGITS
                and max(map(len, numbers)) <= FAST_DIGITS
                and PLAIN_DECIMALS.fullmatch(value_text)):
            return False
        found = list(map(self._known.get, zip(metrics, tag_words)))
        if None in found:
            return False
        keys, described = zip(*found)
        batch.series.update(zip(keys, described))
        batch.series_of += keys
        batch.timestamps += map(int, stamps)
        dots = value_text.count(b".")  # at most one a value (the expression says so)
        batch.values += map(int, numbers) if not dots else map(float, numbers) if \
            dots == len(numbers) else [float(v) if DOT in v else int(v) for v in numbers]
        batch.errors += [None] * len(keys)
        return True

    def add_line(self, line: bytes, batch: PointBatch) -> None:
        """Add the point of one raw ``put`` line (``b"put ..."``) to ``batch`` (or its error)."""
        fields = line.split(b" ", 4)
        if len(fields) == 5:
            known = self._known.get((fields[1], fields[4]))
            ts, value = fields[2], fields[3]
            # ts[0] != "0": a zero timestamp is refused (by the slow path, with its message)
            if known is not None and ts.isdigit() and len(ts) <= FAST_DIGITS and ts[0] != 48:
                key, (metric, tags) = known
                timestamp = int(ts)
                if value.isdigit() and len(value) <= FAST_DIGITS:
                    number: Value = int(value)
                else:  # a float or a negative number: OpenTSDB's rules and messages
                    try:
                        number = parse_value(value.decode("utf-8", "replace"), metric,
                                             timestamp)
                    except BadRequestError as exc:
                        batch.reject(exc)
                        return
                batch.add(key, metric, tags, timestamp, number)
                return
        words = line.decode("utf-8", "replace").split()
        self.add(words, batch)
        if len(fields) == 5 and batch.errors[-1] is None:
            self._learn(fields, words, batch)

    def _learn(self, fields: list[bytes], words: list[str], batch: PointBatch) -> None:
        """Remember a good line's series when its words are exactly its single-space fields."""
        if words != line_words(fields):
            return  # tabs, runs of spaces, other whitespace: such lines take the slow path
        if len(self._known) >= MAX_CACHED_SERIES:
            self._known.clear()
        key = batch.series_of[-1]
        self._known[(fields[1], fields[4])] = (key, batch.series[key])

    def add(self, words: list[str], batch: PointBatch) -> None:
        """Add the point of one split ``put`` line to ``batch`` (or its error)."""
        try:
            self._add(words, batch)
        except BadRequestError as exc:
            batch.reject(exc)

    def _add(self, words: list[str], batch: PointBatch) -> None:
        if len(words) < 5:
            raise BadRequestError(f"not enough arguments (need least 4, got {len(words) - 1})")
        metric, ts_text, value_text = words[1], words[2], words[3]
        if ts_text.isascii() and ts_text.isdigit() and len(ts_text) <= FAST_DIGITS:
            timestamp = int(ts_text)
        else:
            timestamp = parse_long(ts_text.replace(".", ""))
        if timestamp <= 0:
            raise BadRequestError(f"invalid timestamp: {timestamp}")
        # The series as spelled: its words joined (none holds a space), a str whose hash
        # Python keeps, so the writer's look-ups of a block's series cost no hashing.
        key = " ".join(words[1:2] + words[4:])
        tags = self._tags.get(key)
        if tags is None:
            tags = self._parse_tags(key, words[4:])
        if isinstance(tags, BadRequestError):
            raise tags
        if value_text.isascii() and value_text.isdigit() and len(value_text) <= FAST_DIGITS:
            value: Value = int(value_text)
        else:
            value = parse_value(value_text, metric, timestamp)
        batch.add(key, metric, tags, timestamp, value)

    def _parse_tags(self, key: str, words: list[str]) -> TagPairs | BadRequestError:
        if len(self._tags) >= MAX_CACHED_SERIES:
            self._tags.clear()
        try:
            tags: TagPairs | BadRequestError = parse_tags(words)
        except BadRequestError as exc:
            tags = exc
        self._tags[key] = tags
        return tags


def line_words(fields: list[bytes]) -> list[str]:
    """The words of a line split at single spaces (what ``str.split()`` gives a plain line)."""
    return [f.decode("utf-8", "replace") for f in fields[:4]] + \
        fields[4].decode("utf-8", "replace").split(" ")
