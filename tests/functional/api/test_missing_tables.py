"""A store without OpenTSDB's tables is a clear 500 naming the table and the fix, not a crash."""

from __future__ import annotations

from pathlib import Path

from app import create_app


def test_missing_tables_are_a_clear_server_error(tmp_path: Path) -> None:
    app = create_app({"tsd.storage": f"sqlite:///{tmp_path / 'empty.db'}"})
    response = app.test_client().get("/api/suggest?type=metrics")
    assert response.status_code == 500
    assert response.get_json() == {"error": {
        "code": 500, "message": "Table not found: tsdb-uid",
        "details": "Run `pytsd create-tables` to create OpenTSDB's tables"}}
