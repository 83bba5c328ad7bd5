"""tsd.mode: ro serves no writes, wo no reads (404 as OpenTSDB, which leaves them unregistered)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient


@pytest.mark.parametrize(("mode", "method", "path", "status"), [
    ("ro", "post", "/api/put", 404),
    ("ro", "get", "/api/uid/assign?metric=a", 404),
    ("ro", "post", "/api/v1/annotation", 404),
    ("ro", "get", "/api/tree", 404),  # RpcManager registers TreeRpc in rw and wo modes only
    ("wo", "get", "/api/tree", 200),
    ("ro", "get", "/api/suggest?type=metrics", 200),
    ("wo", "get", "/api/suggest?type=metrics", 404),
    ("wo", "get", "/api/query?start=1h-ago&m=sum:a", 404),
    ("wo", "get", "/api/version", 200),
    ("rw", "get", "/api/suggest?type=metrics", 200),
])
def test_mode_hides_endpoints(make_client: Callable[[dict[str, Any]], FlaskClient], mode: str,
                              method: str, path: str, status: int) -> None:
    response = getattr(make_client({"tsd.mode": mode}), method)(path, data="{}")
    assert response.status_code == status
    if status == 404:
        assert response.get_json()["error"]["message"] == "Endpoint not found"
