"""pytsd's Flask class (app/api/flask_app.py): whether a hook or view is a coroutine is
asked once per function, not for every hook of every request."""

from __future__ import annotations

import flask.app
import pytest
from flask import Flask


def test_each_function_is_asked_about_once(app: Flask, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    asked: list[object] = []
    real = flask.app.iscoroutinefunction

    def counting(func: object) -> bool:
        asked.append(func)
        return real(func)

    monkeypatch.setattr(flask.app, "iscoroutinefunction", counting)
    client = app.test_client()
    assert client.get("/api/version").status_code == 200
    first = len(asked)
    assert first > 0
    for _ in range(3):
        assert client.get("/api/version").status_code == 200
    assert len(asked) == first
