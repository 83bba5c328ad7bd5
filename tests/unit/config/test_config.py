"""Settings: defaults, opentsdb.conf, TSD_* variables and their precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import SETTINGS, env_name, load_config
from app.errors import TsdbError

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_match_opentsdb() -> None:
    config = load_config(environ={})
    assert config["tsd.storage.hbase.data_table"] == "tsdb"
    assert config["tsd.storage.hbase.uid_table"] == "tsdb-uid"
    assert config["tsd.storage.salt.width"] == 0
    assert config["tsd.storage.salt.buckets"] == 20
    assert config["tsd.storage.uid.width.metric"] == 3
    assert config["tsd.storage.max_tags"] == 8
    assert config["tsd.core.auto_create_metrics"] is False
    assert config["tsd.storage"].startswith("sqlite:///")
    assert config["tsd.storage"].endswith("/data/pytsd.db")


def test_env_overrides_file_and_mapping_overrides_env(tmp_path: Path) -> None:
    conf = tmp_path / "opentsdb.conf"
    conf.write_text("# comment\ntsd.storage.salt.width = 1\n"
                    "tsd.core.auto_create_metrics = true\ntsd.some.unknown = x\n")
    environ = {"TSD_CONFIG": str(conf), "TSD_STORAGE_SALT_WIDTH": "2"}
    config = load_config(environ=environ)
    assert config["tsd.storage.salt.width"] == 2
    assert config["tsd.core.auto_create_metrics"] is True
    assert config["tsd.some.unknown"] == "x"
    assert load_config({"tsd.storage.salt.width": "3"}, environ)["tsd.storage.salt.width"] == 3


def test_env_name() -> None:
    assert env_name("tsd.core.auto_create_metrics") == "TSD_CORE_AUTO_CREATE_METRICS"
    assert env_name("tsd.storage") == "TSD_STORAGE"


def test_bad_number_is_a_clear_error() -> None:
    with pytest.raises(TsdbError, match="Invalid value for tsd.storage.salt.width"):
        load_config(environ={"TSD_STORAGE_SALT_WIDTH": "one"})


def test_every_setting_is_documented() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    missing = [key for key in SETTINGS if f"`{key}`" not in docs]
    assert missing == []


def test_masked_hides_passwords() -> None:
    config = load_config({"tsd.storage.hbase.password": "s3cret"}, environ={})
    assert config.masked()["tsd.storage.hbase.password"] == "********"
    assert config.masked()["tsd.storage.salt.width"] == "0"
