"""The embedded store has no 'missing tables' state: its first use creates them.

(HBase keeps OpenTSDB's rule; tests/integration/test_hbase_errors.py covers its clear 503.)
"""

from __future__ import annotations

from pathlib import Path

from app import create_app


def test_a_new_embedded_store_answers_instead_of_table_not_found(tmp_path: Path) -> None:
    app = create_app({"tsd.storage": f"sqlite:///{tmp_path / 'empty.db'}"})
    response = app.test_client().get("/api/suggest?type=metrics")
    assert (response.status_code, response.get_json()) == (200, [])
