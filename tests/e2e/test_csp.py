"""Both pages work under a strict Content-Security-Policy (``default-src 'self'``).

The header is added here, on the way to the browser, as a proxy (or the ``plugins`` work)
would: Chromium then refuses any inline script, style or handler and logs the refusal, which
fails the test through the ``page`` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

CSP = "default-src 'self'"


def with_csp(route: Any) -> None:
    response = route.fetch()
    route.fulfill(response=response, headers={**response.headers,
                                              "content-security-policy": CSP})


@pytest.mark.parametrize(("path", "ready"), [
    ("/?range=24h&m=sum:10m-avg:sys.cpu.user{host=web01}", "#chart path.line"),
    ("/annotations?range=24h", "#chart g.note"),
    ("/annotations?range=24h&m=sys.cpu.user&tags=host%3Dweb01", "#chart path.line"),
])
def test_pages_under_a_strict_csp(page: Any, live_server: str, path: str, ready: str) -> None:
    violations: list[str] = []
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    page.route(f"{live_server}/**", with_csp)
    response = page.goto(f"{live_server}{path}")
    assert response is not None and response.headers["content-security-policy"] == CSP
    page.locator(ready).first.wait_for()
    # Tooltips are placed with CSSOM, which the policy allows: hover one.
    page.locator("#chart g.note rect.hit").first.hover()
    assert page.locator("#chart-tooltip").is_visible()
    assert violations == []
