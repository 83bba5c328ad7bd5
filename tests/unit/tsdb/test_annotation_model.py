"""The Annotation object: Jackson/Java byte compatibility and OpenTSDB's sync semantics.

Hash values are Java's documented ``String.hashCode`` (s[0]*31^(n-1) + ... + s[n-1] over
UTF-16 code units), worked out by hand in the comments.
"""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.jackson import jackson_string, java_hashmap_order, java_string_hash
from app.tsdb.annotation_model import (
    Note,
    merge,
    note_from_json,
    note_from_storage,
)


@pytest.mark.parametrize("text, expected", [
    ("", 0),
    ("a", 97),
    ("ab", 97 * 31 + 98),  # 3105
    ("hello", 99162322),  # the textbook value
    ("Aa", 2112), ("BB", 2112),  # the textbook collision
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two chars: 1772899
])
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_string_hash_wraps_to_signed_int() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, the well-known overflow example.
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_hashmap_order() -> None:
    # Capacity for 2 keys: tableSizeFor((int)(2 / 0.75f + 1)) = tableSizeFor(3) = 4.
    # "a" = 97 -> bucket 1, "h" = 104 -> bucket 0: a Java HashMap iterates h, then a.
    assert java_hashmap_order(["a", "h"]) == ["h", "a"]
    # 3 keys: capacity 8; "h" -> 0, "a" -> 1, "b" -> 2.
    assert java_hashmap_order(["b", "a", "h"]) == ["h", "a", "b"]
    # Same bucket (equal hashes): sorted by key, a fixed point of OpenTSDB's round trip.
    assert java_hashmap_order(["BB", "Aa"]) == ["Aa", "BB"]


def test_jackson_string() -> None:
    assert jackson_string('q"b\\s\b\t\n\f\r') == '"q\\"b\\\\s\\b\\t\\n\\f\\r"'
    assert jackson_string("\x00\x1f\x7f/é") == '"\\u0000\\u001F\x7f/é"'


def test_storage_json_matches_getStorageJSON() -> None:
    # Field order and null custom from Annotation#getStorageJSON; tsuid only when non-empty.
    assert Note(start_time=10, description="d").storage_json() == (
        b'{"startTime":10,"endTime":0,"description":"d","notes":"","custom":null}')
    note = Note(tsuid="0A", start_time=10, end_time=11, notes="n", custom={"k": "v"})
    assert note.storage_json() == (b'{"tsuid":"0A","startTime":10,"endTime":11,'
                                   b'"description":"","notes":"n","custom":{"k":"v"}}')


def test_storage_round_trip_is_lenient() -> None:
    note = note_from_storage(b'{"startTime":5,"description":null,"extra":1,"custom":{"a":1}}')
    assert note == Note(start_time=5, custom={"a": "1"})


def test_query_json_is_in_seconds() -> None:
    note = Note(start_time=1388450562500, end_time=1388450600000)
    assert note.query_json()["startTime"] == 1388450562
    assert note.query_json()["endTime"] == 1388450600
    assert note.api_json()["startTime"] == 1388450562500


def test_setters_track_changes_like_opentsdb() -> None:
    # Annotation#setDescription etc.: a value equal to the default is no change; custom is.
    assert note_from_json({"startTime": 1, "description": "", "endTime": 0}).changed == set()
    assert note_from_json({"startTime": 1, "custom": {}}).changed == {"custom"}
    request = note_from_json({"startTime": "7", "endTime": 8.0, "notes": 5})
    assert request.note == Note(start_time=7, end_time=8, notes="5")
    assert request.changed == {"end_time", "notes"}


@pytest.mark.parametrize("body", [[], {"startTime": True}, {"startTime": -1},
                                  {"startTime": 1, "custom": {"a": [1]}},
                                  {"startTime": 1, "description": {"x": 1}}])
def test_bad_request_bodies(body: object) -> None:
    with pytest.raises(BadRequestError):
        note_from_json(body)


def test_merge_post_keeps_stored_fields_put_resets_them() -> None:
    stored = Note(start_time=100, end_time=200, description="old", notes="keep",
                  custom={"o": "ops"})
    request = note_from_json({"startTime": 100, "description": "new"})
    assert merge(request, stored, overwrite=False) == Note(
        start_time=100, end_time=200, description="new", notes="keep", custom={"o": "ops"})
    assert merge(request, stored, overwrite=True) == Note(start_time=100, description="new")


def test_merge_takes_the_smaller_start() -> None:
    # syncNote: the same cell named in ms and in s keeps the smaller number.
    request = note_from_json({"startTime": 100000, "notes": "x"})
    assert merge(request, Note(start_time=100), overwrite=False).start_time == 100
