"""Pure framing: OpenTSDB's line protocol split into lines, and the HTTP request head's limits."""

from __future__ import annotations

from app.server.errors import HttpError

# OpenTSDB's LineBasedFrameDecoder(1024): the longest line, terminator excluded.
MAX_LINE_BYTES = 1024


class TooLong:
    """Marks, in the framer's output, a line that was longer than the limit and was dropped."""

    def __init__(self, length: int) -> None:
        self.length = length  # bytes seen before the limit tripped (at least limit + 1)

    def reply(self, limit: int) -> bytes:
        return f"error: line too long (over {limit} bytes); discarded\n".encode()


Segment = list[bytes] | TooLong


class LineFramer:
    """Split a byte stream into lines (``\\n``, a trailing ``\\r`` removed), at most ``limit`` each.

    A longer line is dropped up to its end and reported in place (OpenTSDB closes the
    connection instead, losing every line after it). Output keeps the stream's order: runs of
    complete lines, and a :class:`TooLong` where a line was dropped.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._partial = b""
        self._discarding = False

    def feed(self, data: bytes) -> list[Segment]:
        segments: list[Segment] = []
        run: list[bytes] = []
        buffer = self._partial + data
        parts = buffer.split(b"\n")
        rest = parts.pop()  # after the last newline: an incomplete line, maybe empty
        self._partial = b""
        if parts and self._discarding:  # the end of a line already reported as too long
            parts.pop(0)
            self._discarding = False
        if b"\r" in buffer:
            parts = [part[:-1] if part.endswith(b"\r") else part for part in parts]
        if parts and max(map(len, parts)) <= self.limit:
            run = parts  # the usual block: no line over the limit, no per-line Python
        else:
            for part in parts:
                if len(part) > self.limit:
                    run = _flush(segments, run)
                    segments.append(TooLong(len(part)))
                else:
                    run.append(part)
        if self._discarding:
            pass
        elif len(rest) > self.limit + 1:  # +1: the line may still end in "\r\n"
            run = _flush(segments, run)
            segments.append(TooLong(len(rest)))
            self._discarding = True
        else:
            self._partial = rest
        _flush(segments, run)
        return segments

    def finish(self) -> list[bytes]:
        """At end of stream: the unterminated last line, if any (OpenTSDB drops it)."""
        partial, self._partial = self._partial.rstrip(b"\r"), b""
        return [partial] if partial and not self._discarding else []


def _flush(segments: list[Segment], run: list[bytes]) -> list[bytes]:
    """Close the current run of lines into ``segments``; return a fresh run."""
    if run:
        segments.append(run)
    return []


def find_head_end(buffer: bytes, max_line: int, max_headers: int) -> int:
    """Index just past the request head in ``buffer``, or -1 if incomplete; raise over limits.

    A request line (method, URL, version) longer than ``max_line`` is 414; header lines
    longer than ``max_headers`` in all are 431. Both are decided as soon as the bytes are in,
    without waiting for the rest of the head.
    """
    line_end = buffer.find(b"\n", 0, max_line + 2)  # +2: the line's own "\r\n"
    if line_end < 0:
        if len(buffer) > max_line + 1:
            raise HttpError(414, "Request-URI Too Long",
                            f"The request line is longer than {max_line} bytes")
        return -1
    if buffer.startswith(b"\n", line_end + 1) or buffer.startswith(b"\r\n", line_end + 1):
        return line_end + (2 if buffer[line_end + 1] == 13 else 1) + 1  # no headers at all
    end = buffer.find(b"\r\n\r\n", line_end - 1)
    end = end + 4 if end >= 0 else -1
    if end < 0:
        alt = buffer.find(b"\n\n", line_end)
        end = alt + 2 if alt >= 0 else -1
    headers = (end if end >= 0 else len(buffer)) - line_end - 1
    if headers > max_headers + 4:
        raise HttpError(431, "Request Header Fields Too Large",
                        f"The request headers are longer than {max_headers} bytes")
    return end


class ChunkSizes:
    """Follows a chunked body's framing beside h11, to refuse at once a chunk announced larger
    than the body limit (h11 would wait for its bytes until the body timeout).

    Only the sizes are read here; h11 still validates the framing. Once the framing is
    something this reader does not follow (a bad size line), it stops and leaves it to h11.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._max_digits = len(f"{limit_bytes:x}")
        self._line = b""
        self._skip = 0  # bytes of chunk data (and its CRLF) still to pass over
        self._done = False

    def feed(self, data: bytes) -> None:
        """Raise 413 as soon as a size line announces more than the limit."""
        pos = 0
        while pos < len(data) and not self._done:
            if self._skip:
                step = min(self._skip, len(data) - pos)
                self._skip -= step
                pos += step
                continue
            end = data.find(b"\n", pos)
            if end < 0:
                self._line += data[pos:]
                self._check_digits(self._line)
                return
            line, self._line, pos = self._line + data[pos:end], b"", end + 1
            self._size_line(line)

    def _check_digits(self, partial: bytes) -> None:
        digits = partial.split(b";", 1)[0].strip().lstrip(b"0")
        if len(digits) > self._max_digits and all(c in b"0123456789abcdefABCDEF" for c in digits):
            self._refuse()

    def _size_line(self, line: bytes) -> None:
        text = line.split(b";", 1)[0].strip()
        try:
            size = int(text, 16)
        except ValueError:
            self._done = True  # not ours to judge: h11 answers 400
            return
        if size > self.limit_bytes:
            self._refuse()
        if size == 0:
            self._done = True  # the last chunk; trailers follow
        self._skip = size + 2  # the data and its CRLF

    def _refuse(self) -> None:
        raise HttpError(413, "Request Entity Too Large",
                        f"A chunk is announced larger than the body limit of "
                        f"{self.limit_bytes} bytes")
