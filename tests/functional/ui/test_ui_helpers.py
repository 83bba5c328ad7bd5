"""The UI's JSON helpers (/ui/api/*), /docs/, and the pages' markup, on both backends.

Expected values are written out by hand from what the test put in; notes are written through
the public API, as a user or Grafana would.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import __version__

NOW_S = 1_700_000_000
SERIES = [("sys.cpu.user", {"host": "web01"}), ("sys.cpu.user", {"host": "web02"}),
          ("net.bytes", {"host": "web01", "iface": "eth0"})]


def put_points(client: FlaskClient) -> None:
    body = [{"metric": metric, "timestamp": NOW_S - 3600 + i * 60, "value": i, "tags": tags}
            for metric, tags in SERIES for i in range(3)]
    response = client.post("/api/put", json=body)
    assert response.status_code == 204, response.text


def tsuid_of(client: FlaskClient, metric: str, tags: dict[str, str]) -> str:
    m = f"{metric}{{{','.join(f'{k}={v}' for k, v in tags.items())}}}"
    response = client.get(f"/api/query?start={NOW_S - 7200}&end={NOW_S}&m=sum:{m}&show_tsuids")
    assert response.status_code == 200, response.text
    return str(response.json[0]["tsuids"][0])


def put_note(client: FlaskClient, start_s: int, description: str, tsuid: str = "",
             **extra: Any) -> None:
    body = {"startTime": start_s, "description": description, **extra}
    if tsuid:
        body["tsuid"] = tsuid
    response = client.put("/api/annotation", json=body)
    assert response.status_code == 200, response.text


def test_notes_lists_global_and_every_series(client: FlaskClient) -> None:
    put_points(client)
    web01 = tsuid_of(client, *SERIES[0])
    net = tsuid_of(client, *SERIES[2])
    put_note(client, NOW_S - 3000, "Deploy", notes="all hosts")
    put_note(client, NOW_S - 2000, "CPU spike", web01)
    put_note(client, NOW_S - 1000, "Link flap", net, custom={"owner": "net"})
    put_note(client, NOW_S - 90_000, "Too old", web01)

    response = client.get(f"/ui/api/notes?start={NOW_S - 7200}&end={NOW_S}")
    assert response.status_code == 200, response.text
    assert response.json["total"] == 3 and response.json["truncated"] is False
    assert response.json["annotations"] == [
        {"tsuid": "", "description": "Deploy", "notes": "all hosts", "endTime": 0,
         "startTime": NOW_S - 3000},
        {"tsuid": web01, "description": "CPU spike", "notes": "", "endTime": 0,
         "startTime": NOW_S - 2000, "metric": "sys.cpu.user", "tags": {"host": "web01"}},
        {"tsuid": net, "description": "Link flap", "notes": "", "custom": {"owner": "net"},
         "endTime": 0, "startTime": NOW_S - 1000, "metric": "net.bytes",
         "tags": {"host": "web01", "iface": "eth0"}},
    ]


def test_notes_search_limit_and_errors(client: FlaskClient) -> None:
    put_points(client)
    web02 = tsuid_of(client, *SERIES[1])
    for i in range(3):
        put_note(client, NOW_S - 3000 + i, f"Deploy {i}", web02 if i else "")
    put_note(client, NOW_S - 100, "Reboot")
    window = f"start={NOW_S - 7200}&end={NOW_S}"

    found = client.get(f"/ui/api/notes?{window}&q=DEPLOY&limit=2").json
    assert [n["description"] for n in found["annotations"]] == ["Deploy 0", "Deploy 1"]
    assert (found["total"], found["truncated"]) == (3, True)
    for query, message in [("", "Missing the start time value"),
                           (f"{window}&limit=0", "Invalid limit: 0"),
                           (f"start={NOW_S}&end={NOW_S - 10}",
                            "The end timestamp cannot be less than the start timestamp"),
                           ("start=yesterday", None)]:
        response = client.get(f"/ui/api/notes?{query}")
        assert response.status_code == 400, query
        assert set(response.json) == {"error"}
        if message:
            assert response.json["error"]["message"] == message


def test_status_counts_uids_and_points(client: FlaskClient) -> None:
    before = client.get("/ui/api/status").json["worker"]["pointsWritten"]
    put_points(client)
    status = client.get("/ui/api/status").json
    assert status["version"] == __version__
    assert status["storage"]["backend"] in ("sqlite", "hbase")
    assert status["uids"] == {"metrics": 2, "tagk": 2, "tagv": 3}
    assert status["worker"]["pointsWritten"] - before == 9
    # The explorer opens on the metric named last: net.bytes was put after sys.cpu.user.
    assert status["newestMetric"] == "net.bytes"


def test_status_without_metrics_has_no_newest(client: FlaskClient) -> None:
    assert client.get("/ui/api/status").json["newestMetric"] == ""


def test_storage_summary() -> None:
    from app.ui.helpers import storage_summary

    assert storage_summary("sqlite:////var/lib/pytsd.db") == {"backend": "sqlite",
                                                               "location": "/var/lib/pytsd.db"}
    assert storage_summary("sqlite:///data/x.db") == {"backend": "sqlite",
                                                       "location": "data/x.db"}
    assert storage_summary("hbase://10.0.0.5:9090") == {"backend": "hbase",
                                                         "location": "10.0.0.5:9090"}


class _Inline(HTMLParser):
    """Collects what a strict Content-Security-Policy would block."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.problems.append("inline <script>")
        if tag == "style":
            self.problems.append("<style>")
        self.problems += [f"{tag} {name}=" for name in names
                          if name == "style" or name.startswith("on")]
        self.problems += [f"{tag} {name}={value}" for name, value in attrs
                          if value and value.strip().lower().startswith("javascript:")]


@pytest.mark.parametrize("path", ["/", "/annotations", "/docs/"])
def test_pages_work_under_a_strict_csp(client: FlaskClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    parser = _Inline()
    parser.feed(response.text)
    assert parser.problems == []
    assert "data:" not in response.text  # default-src 'self' refuses data: URLs too


def test_static_modules_set_no_inline_code() -> None:
    """The scripts never write HTML or style attributes (user text goes in as text)."""
    from app.ui import bp

    assert bp.static_folder is not None
    from pathlib import Path

    sources = {p.name: p.read_text() for p in Path(bp.static_folder).rglob("*.js")}
    assert len(sources) >= 10
    for name, text in sources.items():
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                       "eval(", "new Function", 'setAttribute("style"', "setAttribute('style'"):
            assert banned not in text, f"{name} uses {banned}"


def test_grafana_link_only_when_configured(make_client: Any) -> None:
    plain = make_client({})
    assert 'data-grafana-url=""' in plain.get("/").text
    assert ">Grafana<" not in plain.get("/").text
    linked = make_client({"tsd.ui.grafana_url": "http://grafana.example:3000/"})
    page = linked.get("/annotations").text
    assert 'data-grafana-url="http://grafana.example:3000"' in page
    assert re.search(r'<a href="http://grafana.example:3000" class="grafana">Grafana</a>', page)


def test_docs_are_served_as_html_pages(client: FlaskClient) -> None:
    index = client.get("/docs/")
    assert index.status_code == 200
    assert 'href="/docs/annotations.md"' in index.text
    doc = client.get("/docs/annotations.md")
    assert doc.status_code == 200
    assert doc.headers["Content-Type"] == "text/html; charset=utf-8"  # one charset
    assert '<h1 id="annotations">Annotations</h1>' in doc.text
    # The documents' own links and pictures work: section anchors, images under /docs/images/.
    assert '<h2 id="the-annotation-page">' in doc.text
    assert '<img src="images/annotations.png" alt="The annotation manager"' in doc.text
    with client.get("/docs/images/annotations.png") as image:  # closes the file it sends
        assert image.status_code == 200 and image.mimetype == "image/png"
        assert image.data.startswith(b"\x89PNG")
    # Tables are tables, code stays code.
    assert "<table>" in doc.text and "<pre><code" in doc.text
    parser = _Inline()
    parser.feed(doc.text)
    assert parser.problems == []
    assert client.get("/docs/nope.md").status_code == 404
    assert client.get("/docs/..%2Fpyproject.md").status_code == 404
    assert client.get("/docs/images/nope.png").status_code == 404
    assert client.get("/docs/images/..%2F..%2Fpyproject.toml").status_code == 404


def test_docs_keep_raw_html_as_text() -> None:
    from app.ui.docs import render, slug

    html = render("# A <b>title</b>\n\n<script>alert(1)</script>\n\n"
                  "| a | b |\n|--:|:-:|\n| 1 | 2 |\n")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<th class="align-right">a</th>' in html and 'style=' not in html
    assert slug("GET /api/annotation/list (pytsd)") == "get-apiannotationlist-pytsd"
