"""OpenTSDB's ``Annotation`` object: the stored JSON, the API JSON and request parsing.

Stored value of an annotation cell (``Annotation#getStorageJSON``, UTF-8, no whitespace)::

    {["tsuid":str,] "startTime":long, "endTime":long, "description":str, "notes":str,
     "custom":null | {str: str, ...}}

``tsuid`` is left out for a global note. The bytes are written the way Jackson writes them
(control characters escaped, ``\\u00XX`` in upper case, everything else raw UTF-8) and ``custom``
in the order Java's ``HashMap`` iterates it. That matters: OpenTSDB updates a note with a
compare-and-set against its *re-serialisation* of the stored note, so a note written by pytsd
can be edited by OpenTSDB only if its bytes are exactly what OpenTSDB would write.

``startTime``/``endTime`` are seconds, or milliseconds when ``>= 2**32`` (``Const.SECOND_MASK``).
Nothing here does IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.errors import BadRequestError
from app.jackson import jackson_string, java_hashmap_order

SECOND_MASK = 0xFFFFFFFF00000000
LONG_MAX = 2**63 - 1
# The fields whose setters OpenTSDB tracks as "changed" (Annotation#initializeChangedMap).
TRACKED = ("end_time", "description", "notes", "custom")


def to_ms(ts: int) -> int:
    """A timestamp in seconds or milliseconds, in milliseconds."""
    return ts if ts & SECOND_MASK else ts * 1000


def to_s(ts: int) -> int:
    """A timestamp in seconds or milliseconds, in (floored) seconds."""
    return ts // 1000 if ts & SECOND_MASK else ts


@dataclass
class Note:
    """One annotation; ``tsuid == ""`` makes it global. Times as stored (s or ms)."""

    tsuid: str = ""
    start_time: int = 0
    end_time: int = 0
    description: str = ""
    notes: str = ""
    custom: dict[str, str] | None = None
    # Extra, never stored: the series' names, for listings.
    series: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def start_ms(self) -> int:
        return to_ms(self.start_time)

    def api_json(self) -> dict[str, Any]:
        """The note as OpenTSDB's Jackson prints it (``@JsonInclude(NON_NULL)``, its order)."""
        body: dict[str, Any] = {"tsuid": self.tsuid, "description": self.description,
                                "notes": self.notes}
        if self.custom is not None:
            body["custom"] = {key: self.custom[key] for key in java_hashmap_order(self.custom)}
        body["startTime"] = self.start_time
        body["endTime"] = self.end_time
        return body

    def query_json(self) -> dict[str, Any]:
        """The note inside ``/api/query`` results: times always in seconds, because Grafana
        computes ``startTime * 1000`` (OpenTSDB prints a millisecond note 1000 times too late)."""
        body = self.api_json()
        body["startTime"] = to_s(self.start_time)
        body["endTime"] = to_s(self.end_time)
        return body

    def listing_json(self) -> dict[str, Any]:
        """:meth:`api_json` plus ``metric`` and ``tags`` of a series note (our listing)."""
        body = self.api_json()
        if self.series is not None:
            body.update(self.series)
        return body

    def storage_json(self) -> bytes:
        """The exact bytes OpenTSDB's ``getStorageJSON`` writes for this note."""
        parts = []
        if self.tsuid:
            parts.append(f'"tsuid":{jackson_string(self.tsuid)}')
        parts.append(f'"startTime":{self.start_time}')
        parts.append(f'"endTime":{self.end_time}')
        parts.append(f'"description":{jackson_string(self.description)}')
        parts.append(f'"notes":{jackson_string(self.notes)}')
        if self.custom is None:
            parts.append('"custom":null')
        else:
            pairs = ",".join(f"{jackson_string(k)}:{jackson_string(self.custom[k])}"
                             for k in java_hashmap_order(self.custom))
            parts.append('"custom":{' + pairs + "}")
        return ("{" + ",".join(parts) + "}").encode("utf-8", errors="replace")

    def matches_text(self, needle: str) -> bool:
        """Case-insensitive substring search in description, notes and custom keys/values."""
        needle = needle.casefold()
        haystack = [self.description, self.notes]
        if self.custom:
            haystack += [text for pair in self.custom.items() for text in pair]
        return any(needle in text.casefold() for text in haystack)


# --- reading ---------------------------------------------------------------------------------


def note_from_storage(value: bytes) -> Note:
    """Parse a stored cell the way Jackson does (unknown fields ignored, defaults kept)."""
    import json

    data = json.loads(value.decode("utf-8", errors="replace"))
    if not isinstance(data, dict):
        raise ValueError("an annotation cell must hold a JSON object")
    custom = data.get("custom")
    return Note(
        tsuid=str(data.get("tsuid") or ""),
        start_time=_stored_long(data.get("startTime")),
        end_time=_stored_long(data.get("endTime")),
        description=_stored_text(data.get("description")),
        notes=_stored_text(data.get("notes")),
        custom={str(k): _stored_text(v) for k, v in custom.items()}
        if isinstance(custom, dict) else None,
    )


def _stored_long(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _stored_text(value: Any) -> str:
    return "" if value is None else str(value)


# --- requests --------------------------------------------------------------------------------


@dataclass
class NoteRequest:
    """A note as a client sent it, with the fields its setters marked as changed."""

    note: Note
    changed: set[str] = field(default_factory=set)


def note_from_json(body: Any) -> NoteRequest:
    """Jackson's ``parseAnnotationV1``: setters run only for the keys present.

    A setter marks its field changed only when the value differs from the default
    (``""``, ``0``), except ``custom``, which any non-null map marks.
    """
    if not isinstance(body, dict):
        raise BadRequestError("Unable to parse the given JSON",
                              "An annotation must be a JSON object")
    request = NoteRequest(Note())
    if body.get("tsuid") is not None:
        request.note.tsuid = _text(body, "tsuid")
    if body.get("startTime") is not None:
        request.note.start_time = _long(body, "startTime")
    if body.get("endTime") is not None:
        set_field(request, "end_time", _long(body, "endTime"))
    for key in ("description", "notes"):
        if body.get(key) is not None:
            set_field(request, key, _text(body, key))
    if body.get("custom") is not None:
        set_field(request, "custom", _custom(body["custom"]))
    return request


def set_field(request: NoteRequest, name: str, value: Any) -> None:
    """One of OpenTSDB's tracking setters."""
    if name == "custom" or getattr(request.note, name) != value:
        setattr(request.note, name, value)
        request.changed.add(name)


def _long(body: Mapping[str, Any], key: str) -> int:
    value = body[key]
    if isinstance(value, bool):
        raise _field_error(key, "must be a number")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())  # Jackson coerces numeric strings
    if not isinstance(value, int):
        raise _field_error(key, "must be an integer timestamp")
    if not 0 <= value <= LONG_MAX:
        raise _field_error(key, "is out of range")
    return value


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body[key]
    if isinstance(value, (dict, list)):
        raise _field_error(key, "must be a string")
    return value if isinstance(value, str) else _scalar_text(value)


def _custom(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _field_error("custom", "must be an object of strings")
    custom = {}
    for key, item in value.items():
        if isinstance(item, (dict, list)) or item is None:
            raise _field_error("custom", f"value of '{key}' must be a string")
        custom[key] = item if isinstance(item, str) else _scalar_text(item)
    return custom


def _scalar_text(value: Any) -> str:
    """Jackson's scalar-to-String coercion: numbers and booleans as JSON writes them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_error(key: str, problem: str) -> BadRequestError:
    return BadRequestError("Unable to parse the given JSON", f"'{key}' {problem}")


def merge(incoming: NoteRequest, stored: Note, overwrite: bool) -> Note:
    """``Annotation#syncNote``: what gets written when a note already exists.

    The start time becomes the smaller of the two (they name the same cell, maybe in other
    units). POST (``overwrite=False``) keeps the stored value of every field the request did
    not change; PUT keeps what the request holds (defaults for fields it left out).
    """
    note = replace(incoming.note)
    if stored.start_time > 0 and (stored.start_time < note.start_time or note.start_time == 0):
        note.start_time = stored.start_time
    if not overwrite:
        for name in TRACKED:
            if name not in incoming.changed:
                setattr(note, name, getattr(stored, name))
    return note
