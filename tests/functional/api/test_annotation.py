"""/api/annotation, /api/annotations, /api/annotation/bulk (spec §7.8) on both backends.

The store is seeded with the very cells of OpenTSDB's ``TestAnnotationRpc#before`` (written raw,
as OpenTSDB wrote them), and the expectations come from those tests' assertions: every case
names the Java test it mirrors. Cases marked "pytsd" are deliberate improvements
(``docs/annotations.md``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.tsdb import TSDB

TSUID = "000001000001000001"
GLOBAL_ROW = bytes([0, 0, 0, 0x4F, 0x29, 0xD2, 0])  # TestAnnotationRpc.global_row_key
TSUID_ROW = bytes([0, 0, 1, 0x52, 0xC2, 0x09, 0, 0, 0, 1, 0, 0, 1])  # .tsuid_row_key
SEED = {
    GLOBAL_ROW: {
        b"t:\x01\x00\x00": b'{"startTime":1328140800,"endTime":1328140801,"description":'
                           b'"Description","notes":"Notes","custom":{"owner":"ops"}}',
        b"t:\x01\x00\x01": b'{"startTime":1328140801,"endTime":1328140803,"description":'
                           b'"Global 2","notes":"Nothing"}',
    },
    TSUID_ROW: {
        b"t:\x01\x0a\x02": b'{"tsuid":"000001000001000001","startTime":1388450562,'
                           b'"endTime":1419984000,"description":"Hello!","notes":"My Notes",'
                           b'"custom":{"owner":"ops"}}',
        b"t:\x01\x0a\x03": b'{"tsuid":"000001000001000001","startTime":1388450563,'
                           b'"endTime":1419984000,"description":"Note2","notes":"Nothing"}',
        b"t:\x50\x10": b"\x01",
        b"t:\x50\x18": b"\x02",
    },
}


@pytest.fixture
def seeded(tsdb: TSDB) -> TSDB:
    """OpenTSDB's test rows, keyed through the layout so a salted store would work too."""
    assert tsdb.layout.global_annotation_row(1328140800) == GLOBAL_ROW
    assert tsdb.layout.row_key_from_tsuid(bytes.fromhex(TSUID), 1388448000) == TSUID_ROW
    # Names for the UIDs, so the notes can be listed by metric: each gets UID 1 on a new store.
    assert tsdb.metrics.get_or_create_id("sys.cpu.user") == b"\x00\x00\x01"
    assert tsdb.tagk.get_or_create_id("host") == b"\x00\x00\x01"
    assert tsdb.tagv.get_or_create_id("web01") == b"\x00\x00\x01"
    for row, cells in SEED.items():
        tsdb.data_table().put(row, cells)
    return tsdb


def columns(tsdb: TSDB, row: bytes) -> int:
    """MockBase.numColumns: the cell count of a row (-1 when the row is gone)."""
    return len(tsdb.data_table().row(row)) or -1


def text(response: TestResponse) -> str:
    return response.get_data(as_text=True)


def assert_error(response: TestResponse, status: int, message: str) -> None:
    assert response.status_code == status, text(response)
    assert response.json is not None
    assert response.json["error"]["code"] == status
    assert response.json["error"]["message"] == message


# --- GET -------------------------------------------------------------------------------------


def test_get(client: FlaskClient, seeded: TSDB) -> None:  # TestAnnotationRpc#get
    response = client.get(f"/api/annotation?tsuid={TSUID}&start_time=1388450562")
    assert response.status_code == 200
    # Jackson's order for Annotation as OpenTSDB 2.4.1 prints it (the spec said end, start).
    assert text(response) == (
        '{"tsuid":"000001000001000001","description":"Hello!","notes":"My Notes",'
        '"custom":{"owner":"ops"},"startTime":1388450562,"endTime":1419984000}')


def test_get_global(client: FlaskClient, seeded: TSDB) -> None:  # #getGlobal
    response = client.get("/api/annotation?start_time=1328140800")
    assert response.status_code == 200
    # A global note read back has the default tsuid "" (spec §2.9).
    assert response.json == {"tsuid": "", "description": "Description", "notes": "Notes",
                             "custom": {"owner": "ops"}, "endTime": 1328140801,
                             "startTime": 1328140800}


@pytest.mark.parametrize("query", [f"tsuid={TSUID}&start_time=1388450568",  # #getNotFound
                                   "start_time=1388450563"])  # #getGlobalNotFound
def test_get_not_found(client: FlaskClient, seeded: TSDB, query: str) -> None:
    assert_error(client.get(f"/api/annotation?{query}"), 404,
                 "Unable to locate annotation in storage")


def test_get_missing_start(client: FlaskClient, seeded: TSDB) -> None:  # #getMissingStart
    assert_error(client.get(f"/api/annotation?tsuid={TSUID}"), 400, "Missing start time")


def test_get_whole_second_ms_finds_the_seconds_note(client: FlaskClient, seeded: TSDB) -> None:
    # TestAnnotation#getAnnotationNormalizeMs: 1388450562000 ms finds the note stored in s.
    response = client.get(f"/api/annotation?tsuid={TSUID}&start_time=1388450562000")
    assert response.status_code == 200
    assert response.json is not None and response.json["startTime"] == 1388450562


def test_get_with_json_body(client: FlaskClient, seeded: TSDB) -> None:
    response = client.get("/api/annotation", data=json.dumps(
        {"tsuid": TSUID, "startTime": 1388450563}))
    assert response.status_code == 200
    assert response.json is not None and response.json["description"] == "Note2"


def test_get_bad_tsuid(client: FlaskClient, seeded: TSDB) -> None:  # pytsd: 400, not 500
    assert_error(client.get("/api/annotation?tsuid=XYZ&start_time=1388450562"), 400,
                 "Invalid TSUID: XYZ")
    assert_error(client.get("/api/annotation?tsuid=0000010000&start_time=1388450562"), 400,
                 "Invalid TSUID: 0000010000")


# --- /api/annotations ------------------------------------------------------------------------


def test_get_globals(client: FlaskClient, seeded: TSDB) -> None:  # #getGlobals
    response = client.get("/api/annotations?start_time=1328140800")
    assert response.status_code == 200
    assert [n["description"] for n in response.json or []] == ["Description", "Global 2"]


def test_get_globals_range_and_empty(client: FlaskClient, seeded: TSDB) -> None:
    # Both bounds inclusive, on the start time only (spec §7.8).
    response = client.get("/api/annotations?start_time=1328140801&end_time=1328140801")
    assert [n["description"] for n in response.json or []] == ["Global 2"]
    assert client.get("/api/annotations?start_time=1328150000&end_time=1328160000").json == []
    assert_error(client.get("/api/annotations"), 400, "Missing start time")


def test_plural_path_accepts_the_other_verbs(client: FlaskClient, seeded: TSDB) -> None:
    # RpcManager maps api/annotations to the same AnnotationRpc.
    response = client.delete("/api/annotations?start_time=1328140801")
    assert response.status_code == 204
    assert columns(seeded, GLOBAL_ROW) == 1


# --- POST and PUT ----------------------------------------------------------------------------


def test_post_new(client: FlaskClient, seeded: TSDB) -> None:  # #postNew
    response = client.get(f"/api/annotation?tsuid={TSUID}&start_time=1388450564"
                          "&description=Boo&method_override=post")
    assert response.status_code == 200
    assert '"description":"Boo"' in text(response) and '"notes":""' in text(response)
    assert columns(seeded, TSUID_ROW) == 5
    # Annotation#getStorageJSON: tsuid, startTime, endTime, description, notes, custom (null).
    stored = seeded.data_table().row(TSUID_ROW)[b"t:\x01\x0a\x04"]
    assert stored == (b'{"tsuid":"000001000001000001","startTime":1388450564,"endTime":0,'
                      b'"description":"Boo","notes":"","custom":null}')


def test_post_new_global(client: FlaskClient, seeded: TSDB) -> None:  # #postNewGlobal
    response = client.get("/api/annotation?start_time=1328140802&description=Boo"
                          "&method_override=post")
    assert response.status_code == 200
    assert '"description":"Boo"' in text(response) and '"notes":""' in text(response)
    assert columns(seeded, GLOBAL_ROW) == 3
    assert seeded.data_table().row(GLOBAL_ROW)[b"t:\x01\x00\x02"] == (
        b'{"startTime":1328140802,"endTime":0,"description":"Boo","notes":"","custom":null}')


def test_post_new_missing_start(client: FlaskClient, seeded: TSDB) -> None:
    # #postNewMissingStart
    assert_error(client.get(f"/api/annotation?tsuid={TSUID}&description=Boo"
                            "&method_override=post"), 400, "Missing start time")


@pytest.mark.parametrize("query, notes", [
    (f"tsuid={TSUID}&start_time=1388450562", "My Notes"),  # #modify
    ("start_time=1328140800", "Notes"),  # #modifyGlobal
])
def test_post_merges(client: FlaskClient, seeded: TSDB, query: str, notes: str) -> None:
    response = client.get(f"/api/annotation?{query}&description=Boo&method_override=post")
    assert response.status_code == 200
    assert response.json is not None
    assert response.json["description"] == "Boo" and response.json["notes"] == notes
    assert response.json["custom"] == {"owner": "ops"}


@pytest.mark.parametrize("body, notes", [
    ({"tsuid": TSUID, "startTime": 1388450562, "description": "Boo"}, "My Notes"),  # modifyPOST
    ({"startTime": 1328140800, "description": "Boo"}, "Notes"),  # #modifyGlobalPOST
])
def test_post_json_merges(client: FlaskClient, seeded: TSDB, body: dict[str, Any],
                          notes: str) -> None:
    response = client.post("/api/annotation", data=json.dumps(body))
    assert response.status_code == 200
    assert response.json is not None
    assert response.json["description"] == "Boo" and response.json["notes"] == notes


@pytest.mark.parametrize("query, start", [
    (f"tsuid={TSUID}&start_time=1388450562", 1388450562),  # #modifyPut
    ("start_time=1328140800", 1328140800),  # #modifyPutGlobal
])
def test_put_replaces(client: FlaskClient, seeded: TSDB, query: str, start: int) -> None:
    response = client.get(f"/api/annotation?{query}&description=Boo&method_override=put")
    assert response.status_code == 200
    assert response.json is not None
    assert response.json["description"] == "Boo" and response.json["notes"] == ""
    assert response.json["startTime"] == start
    assert "custom" not in response.json and response.json["endTime"] == 0


def test_put_with_verb_and_custom(client: FlaskClient, seeded: TSDB) -> None:
    response = client.put("/api/annotation", data=json.dumps(
        {"tsuid": TSUID, "startTime": 1388450563, "description": "D", "notes": "N",
         "custom": {"a": "1", "h": "2"}, "endTime": 1388450600}))
    assert response.status_code == 200
    # Java 8: new HashMap<>({a, h}) has capacity 4; "a".hashCode() = 97 -> bucket 1,
    # "h".hashCode() = 104 -> bucket 0, so OpenTSDB iterates (and stores) h before a.
    assert text(response) == (
        '{"tsuid":"000001000001000001","description":"D","notes":"N","custom":{"h":"2",'
        '"a":"1"},"startTime":1388450563,"endTime":1388450600}')
    assert seeded.data_table().row(TSUID_ROW)[b"t:\x01\x0a\x03"] == (
        b'{"tsuid":"000001000001000001","startTime":1388450563,"endTime":1388450600,'
        b'"description":"D","notes":"N","custom":{"h":"2","a":"1"}}')


def test_no_change_is_304(client: FlaskClient, seeded: TSDB) -> None:  # #modifyNoChange
    response = client.get(f"/api/annotation?tsuid={TSUID}&start_time=1388450562"
                          "&method_override=post")
    assert response.status_code == 304
    assert response.data == b""
    # Setting a field to its default ("" / 0) is no change either (Annotation#setDescription).
    response = client.post("/api/annotation", data=json.dumps(
        {"startTime": 1328140800, "description": "", "endTime": 0}))
    assert response.status_code == 304


def test_post_json_missing_start(client: FlaskClient, seeded: TSDB) -> None:
    # Annotation#syncToStorage: IllegalArgumentException -> BadRequestException (400).
    assert_error(client.post("/api/annotation", data=json.dumps({"description": "x"})), 400,
                 "The start timestamp has not been set")


@pytest.mark.parametrize("body", ['{"startTime": "soon", "description": "x"}',
                                  '{"startTime": 1328140800, "custom": ["x"]}',
                                  "not json", "[1, 2"])
def test_post_bad_json(client: FlaskClient, seeded: TSDB, body: str) -> None:
    response = client.post("/api/annotation", data=body)
    assert response.status_code == 400, text(response)


def test_milliseconds_start(client: FlaskClient, seeded: TSDB) -> None:
    # TestAnnotation#syncToStorageMilliseconds: 1388450562500 -> qualifier 01 00 27 19 C4
    # (offset 2562500 ms from the 1388448000 row), startTime kept in ms.
    response = client.post("/api/annotation", data=json.dumps(
        {"tsuid": TSUID, "startTime": 1388450562500, "description": "Synced!"}))
    assert response.status_code == 200
    stored = json.loads(seeded.data_table().row(TSUID_ROW)[b"t:\x01\x00\x27\x19\xc4"])
    assert stored["startTime"] == 1388450562500 and stored["notes"] == ""
    # pytsd: the query string keeps the milliseconds (OpenTSDB divides by 1000, issue #729).
    response = client.get(f"/api/annotation?tsuid={TSUID}&start_time=1388450562.500")
    assert response.status_code == 200
    assert response.json is not None and response.json["description"] == "Synced!"


def test_global_milliseconds_start(client: FlaskClient, seeded: TSDB) -> None:
    # TestAnnotation#syncToStorageGlobalMilliseconds: qualifier 01 00 00 01 F4 (500 ms).
    response = client.post("/api/annotation", data=json.dumps(
        {"startTime": 1328140800500, "description": "Synced!"}))
    assert response.status_code == 200
    assert b"t:\x01\x00\x00\x01\xf4" in seeded.data_table().row(GLOBAL_ROW)


def test_stored_json_escapes_like_jackson(client: FlaskClient, seeded: TSDB) -> None:
    description = 'a"b\\c\n\x01é</p>'
    response = client.post("/api/annotation", data=json.dumps(
        {"startTime": 1328140805, "description": description}))
    assert response.status_code == 200
    # Jackson: short escapes for " \ \n, \u0001 in upper-case hex, non-ASCII as raw UTF-8.
    stored = seeded.data_table().row(GLOBAL_ROW)[b"t:\x01\x00\x05"]
    assert stored == ('{"startTime":1328140805,"endTime":0,"description":"a\\"b\\\\c\\n\\u0001'
                      'é</p>","notes":"","custom":null}').encode()
    assert client.get("/api/annotation?start_time=1328140805").json["description"] == (
        description)


# --- DELETE and methods ----------------------------------------------------------------------


def test_delete(client: FlaskClient, seeded: TSDB) -> None:  # #delete
    response = client.get(f"/api/annotation?tsuid={TSUID}&start_time=1388450562"
                          "&method_override=delete")
    assert response.status_code == 204 and response.data == b""
    assert columns(seeded, TSUID_ROW) == 3


def test_delete_global_and_missing(client: FlaskClient, seeded: TSDB) -> None:  # #deleteGlobal
    assert client.delete("/api/annotation?start_time=1328140800").status_code == 204
    assert columns(seeded, GLOBAL_ROW) == 1
    # TestAnnotation#deleteGlobalNotFound: nothing there is still a 204.
    assert client.delete("/api/annotation?start_time=1328140803").status_code == 204
    assert columns(seeded, GLOBAL_ROW) == 1


def test_bad_method(client: FlaskClient, seeded: TSDB) -> None:  # #badMethod (TRACE)
    response = client.open("/api/annotation?start_time=1328140800", method="TRACE")
    assert_error(response, 405, "Method not allowed")


@pytest.mark.parametrize("override, message", [
    ("", "Missing method override value"),
    ("patch", "Unknown or unsupported method override value"),
])
def test_bad_method_override(client: FlaskClient, seeded: TSDB, override: str,
                             message: str) -> None:
    # HttpQuery#getAPIMethod (spec §1).
    response = client.get(f"/api/annotation?start_time=1328140800&method_override={override}")
    assert_error(response, 405, message)


# --- bulk updates ----------------------------------------------------------------------------


def test_bulk_get_is_405(client: FlaskClient, seeded: TSDB) -> None:  # #bulkBadMethodGet
    assert_error(client.get("/api/annotation/bulk"), 405, "Method not allowed")


@pytest.mark.parametrize("body", [
    "",  # #bulkMissingContent
    "Not a json object",  # #bulkMissingInvalidContent
    json.dumps({"tsuid": TSUID, "startTime": 1388450562, "description": "Boo"}),  # single obj
])
def test_bulk_bad_content(client: FlaskClient, seeded: TSDB, body: str) -> None:
    response = client.post("/api/annotation/bulk", data=body)
    assert response.status_code == 400, text(response)


def test_bulk_post_merges(client: FlaskClient, seeded: TSDB) -> None:  # #bulkModifyPOST
    response = client.post("/api/annotation/bulk", data=json.dumps([
        {"tsuid": TSUID, "startTime": 1388450562, "description": "Boo"},
        {"tsuid": "000001000001000002", "startTime": 1388450562, "description": "Gum"}]))
    assert response.status_code == 200
    body = text(response)
    assert '"description":"Boo"' in body and '"notes":"My Notes"' in body
    assert '"description":"Gum"' in body


def test_bulk_post_global(client: FlaskClient, seeded: TSDB) -> None:  # #bulkModifyGlobalPOST
    response = client.post("/api/annotation/bulk", data=json.dumps([
        {"startTime": 1328140800, "description": "Boo"},
        {"startTime": 1388450562, "description": "Gum"}]))
    assert response.status_code == 200
    assert [(n["description"], n["notes"]) for n in response.json or []] == [
        ("Boo", "Notes"), ("Gum", "")]


def test_bulk_missing_start_writes_nothing(client: FlaskClient, seeded: TSDB) -> None:
    # #bulkModifyPOSTMissingStart is a 400; pytsd also leaves the first note untouched.
    response = client.post("/api/annotation/bulk", data=json.dumps([
        {"tsuid": TSUID, "startTime": 1388450562, "description": "Boo"},
        {"tsuid": "000001000001000002", "description": "Gum"}]))
    assert_error(response, 400, "The start timestamp has not been set")
    assert b"Hello!" in seeded.data_table().row(TSUID_ROW)[b"t:\x01\x0a\x02"]


def test_bulk_put_replaces(client: FlaskClient, seeded: TSDB) -> None:  # #bulkModifyPut
    response = client.put("/api/annotation/bulk", data=json.dumps([
        {"tsuid": TSUID, "startTime": 1328140800, "description": "Boo"},
        {"tsuid": "000001000001000002", "startTime": 1328140800, "description": "Gum"}]))
    assert response.status_code == 200
    assert [(n["description"], n["notes"]) for n in response.json or []] == [
        ("Boo", ""), ("Gum", "")]


def test_bulk_put_global_same_start(client: FlaskClient, seeded: TSDB) -> None:
    # #bulkModifyPutGlobal: two notes for one cell, both synced in turn; the last one wins.
    response = client.put("/api/annotation/bulk", data=json.dumps([
        {"startTime": 1328140800, "description": "Boo"},
        {"startTime": 1328140800, "description": "Gum"}]))
    assert response.status_code == 200
    assert '"startTime":1328140800' in text(response) and '"notes":""' in text(response)
    assert client.get("/api/annotation?start_time=1328140800").json["description"] == "Gum"


def test_bulk_skips_unchanged_notes(client: FlaskClient, seeded: TSDB) -> None:
    response = client.post("/api/annotation/bulk", data=json.dumps([
        {"startTime": 1328140800}, {"startTime": 1328140801, "notes": "N"}]))
    assert response.status_code == 200
    assert [n["startTime"] for n in response.json or []] == [1328140801]


# --- bulk deletes ----------------------------------------------------------------------------

TWO_TSUIDS = f"tsuids={TSUID},000001000001000002"


@pytest.mark.parametrize("query, deleted, left", [
    (f"{TWO_TSUIDS}&start_time=1388450560000&end_time=1388450562000", 1, 3),  # #bulkDelete
    (f"{TWO_TSUIDS}&start_time=1388450550000&end_time=1388450560000", 0, 4),  # #...NotFound
    (f"{TWO_TSUIDS}&start_time=1000000000000", 2, 2),  # #bulkDeleteAllTime
])
def test_bulk_delete_series(client: FlaskClient, seeded: TSDB, query: str, deleted: int,
                            left: int) -> None:
    response = client.get(f"/api/annotation/bulk?{query}&method_override=delete")
    assert response.status_code == 200
    assert f'"totalDeleted":{deleted}' in text(response)
    assert columns(seeded, TSUID_ROW) == left


@pytest.mark.parametrize("query, deleted, left", [
    ("start_time=1328140799000&end_time=1328140800000", 1, 1),  # #bulkDeleteGlobal
    ("start_time=1328140600000&end_time=1328140700000", 0, 2),  # #bulkDeleteGlobalNotFound
    ("start_time=1000000000000", 2, -1),  # #bulkDeleteGlobalAllTime
])
def test_bulk_delete_global(client: FlaskClient, seeded: TSDB, query: str, deleted: int,
                            left: int) -> None:
    response = client.get(f"/api/annotation/bulk?{query}&global=true&method_override=delete")
    assert response.status_code == 200
    assert f'"totalDeleted":{deleted}' in text(response)
    assert columns(seeded, GLOBAL_ROW) == left


def test_bulk_delete_response_shape(client: FlaskClient, seeded: TSDB) -> None:
    response = client.delete(f"/api/annotation/bulk?tsuids={TSUID}"
                             "&start_time=1388450560000&end_time=1388450562000")
    assert response.json == {"startTime": 1388450560000, "endTime": 1388450562000,
                             "tsuids": [TSUID], "global": False, "totalDeleted": 1}


@pytest.mark.parametrize("query, message", [
    (f"{TWO_TSUIDS}&end_time=1388450562000", "Missing the start time value"),  # MissingStart
    ("start_time=1388450562000", "Missing the TSUIDs or global annotations flag"),
    ("start_time=1388450562000&tsuids=", "Missing the TSUIDs or global annotations flag"),
])
def test_bulk_delete_errors(client: FlaskClient, seeded: TSDB, query: str, message: str) -> None:
    assert_error(client.get(f"/api/annotation/bulk?{query}&method_override=delete"), 400,
                 message)


@pytest.mark.parametrize("body, deleted, row, left", [
    ({"tsuids": [TSUID, "000001000001000002"], "startTime": "1388450560000",
      "endTime": "1388450562000"}, 1, TSUID_ROW, 3),  # #bulkDeleteDELETE
    ({"startTime": "1328140799000", "endTime": "1328140800000", "global": True}, 1,
     GLOBAL_ROW, 1),  # #bulkDeleteGlobalDELETE
])
def test_bulk_delete_body(client: FlaskClient, seeded: TSDB, body: dict[str, Any], deleted: int,
                          row: bytes, left: int) -> None:
    response = client.delete("/api/annotation/bulk", data=json.dumps(body))
    assert response.status_code == 200
    assert f'"totalDeleted":{deleted}' in text(response)
    assert columns(seeded, row) == left


@pytest.mark.parametrize("body", [
    json.dumps({"tsuids": [TSUID], "endTime": "1388450562000"}),  # #bulkDeleteMissingStartDELETE
    json.dumps({"startTime": "1328140799000", "endTime": "1328140800000"}),  # EmptyTsuids
    "",  # #bulkDeleteNoBodyDELETE
    "{thisisnotjson}",  # #bulkDeleteBadJSONDELETE
])
def test_bulk_delete_body_errors(client: FlaskClient, seeded: TSDB, body: str) -> None:
    response = client.delete("/api/annotation/bulk", data=body)
    assert response.status_code == 400, text(response)


# --- pytsd's listing -------------------------------------------------------------------------


def listing(client: FlaskClient, query: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/annotation/list?{query}")
    assert response.status_code == 200, text(response)
    assert response.json is not None
    return list(response.json["annotations"])


def test_list_raw_opentsdb_notes(client: FlaskClient, seeded: TSDB) -> None:
    notes = listing(client, "start=1328140000&end=1388460000&m=sys.cpu.user{host=web01}")
    assert [(n["tsuid"], n["startTime"]) for n in notes] == [
        ("", 1328140800), ("", 1328140801), (TSUID, 1388450562), (TSUID, 1388450563)]
    assert notes[2]["metric"] == "sys.cpu.user" and notes[2]["tags"] == {"host": "web01"}
    assert "metric" not in notes[0]


def test_list_by_tsuid_text_and_flags(client: FlaskClient, seeded: TSDB) -> None:
    query = "start=1328140000&end=1388460000"
    assert [n["description"] for n in listing(client, f"{query}&tsuid={TSUID}&global=false")] \
        == ["Hello!", "Note2"]
    # q searches description, notes and custom, case-insensitively.
    assert [n["description"] for n in listing(client, f"{query}&tsuid={TSUID}&q=OPS")] == [
        "Description", "Hello!"]
    assert [n["description"] for n in listing(client, f"{query}&m=sys.cpu.user&q=nothing")] \
        == ["Global 2", "Note2"]
    assert listing(client, f"{query}&m=sys.cpu.user{{host=web02}}&global=false") == []
    response = client.get(f"/api/annotation/list?{query}&limit=1")
    assert response.json is not None
    assert response.json["total"] == 2 and response.json["truncated"] is True


def test_list_errors(client: FlaskClient, seeded: TSDB) -> None:
    assert_error(client.get("/api/annotation/list"), 400, "Missing the start time value")
    assert_error(client.get("/api/annotation/list?start=1h-ago&m=no.such.metric"), 400,
                 "No such name for 'metrics': 'no.such.metric'")
    assert client.get("/api/annotation/list?start=1h-ago&limit=0").status_code == 400
    assert client.get("/api/annotation/list?start=2h-ago&end=3h-ago").status_code == 400


def test_edit_a_raw_note_then_opentsdb_can_read_it_back(client: FlaskClient,
                                                        seeded: TSDB) -> None:
    response = client.post("/api/annotation", data=json.dumps(
        {"tsuid": TSUID, "startTime": 1388450563, "description": "Edited"}))
    assert response.status_code == 200
    # What Annotation#getStorageJSON writes for the merged note: OpenTSDB's CAS expects these
    # exact bytes when it edits the note next.
    assert seeded.data_table().row(TSUID_ROW)[b"t:\x01\x0a\x03"] == (
        b'{"tsuid":"000001000001000001","startTime":1388450563,"endTime":1419984000,'
        b'"description":"Edited","notes":"Nothing","custom":null}')
    assert seeded.data_table().row(TSUID_ROW)[b"t:\x50\x10"] == b"\x01"  # data untouched


def test_start_out_of_range(client: FlaskClient, seeded: TSDB) -> None:
    # A base time must fit the row key's 4 bytes: the last second does, 1000 * 2**32 ms does
    # not (pytsd: 400, rather than a note in a wrong row).
    last = client.post("/api/annotation", data=json.dumps(
        {"startTime": 0xFFFFFFFF, "description": "last"}))
    assert last.status_code == 200
    start = 1000 << 32
    response = client.post("/api/annotation", data=json.dumps(
        {"startTime": start, "description": "far"}))
    assert_error(response, 400, f"The start timestamp {start} is out of range")
