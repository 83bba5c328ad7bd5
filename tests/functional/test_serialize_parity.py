"""Every /api/query case, rendered by both dps renderers: the same bytes.

The app renders with the orjson-backed ``render_dps``; a wrapper renders each series again
with the frozen pure-Python renderer (``tests/reference/serialize_v1.py``) and the response
must be identical. The renderer does not depend on the backend, so the embedded store serves.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.api import serialize
from tests.conftest import app_over, backend_config, drop_tables, make_tsdb
from tests.functional.test_query_cases import load_cases, load_points, send
from tests.reference import serialize_v1


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Patch the app's renderer to check each series against the reference one."""
    calls: list[int] = []
    render = serialize.render_dps

    def checked(*args: Any, **kwargs: Any) -> str:
        text = render(*args, **kwargs)
        kwargs.pop("key_cache", None)
        assert text == serialize_v1.render_dps(*args, **kwargs)
        calls.append(len(text))
        return text

    monkeypatch.setattr(serialize, "render_dps", checked)
    yield calls


@pytest.mark.parametrize("case", load_cases())
def test_case_renders_identically(case: dict[str, Any], tmp_path: Path,
                                  compared: list[int]) -> None:
    config = backend_config("sqlite", tmp_path, {"tsd.core.auto_create_metrics": True,
                                                 **case.get("config", {})})
    tsdb = make_tsdb(config)
    try:
        client = app_over(tsdb).test_client()
        load_points(tsdb, client, case, int(time.time()))
        response = send(client, case)
        assert response.status_code == case["expect"].get("status", 200)
        if response.status_code == 200 and '"dps"' in response.get_data(as_text=True):
            assert compared, "the patched renderer was not used"
    finally:
        drop_tables(tsdb)
