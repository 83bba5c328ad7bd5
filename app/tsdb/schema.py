"""OpenTSDB's four tables and their column families, as ``create_table.sh`` makes them."""

from __future__ import annotations

from app.config import Config
from app.storage.base import Store

DATA_FAMILY = b"t"

# create_table.sh: tsdb-uid has families id and name, tsdb has t, tsdb-tree t, tsdb-meta name;
# VERSIONS 1 everywhere but the UID table; COMPRESSION and BLOOMFILTER on every family, TTL on
# the data table's (TSDB_TTL): here from tsd.storage.hbase.compression / bloom_filter /
# data_ttl_s. Its DATA_BLOCK_ENCODING (DIFF) has no field in Thrift1's ColumnDescriptor
# (docs/hbase.md gives the shell's `alter`). Options a family leaves out get HBase's own
# defaults (VERSIONS 1, block cache on): the HBase backend fills them in, because Thrift1's
# column descriptor defaults differ.


def family_options(config: Config) -> dict[str, object]:
    """The options every family of OpenTSDB's tables gets (the UID table's families keep
    HBase's default versions, as create_table.sh's do)."""
    return {"bloom_filter_type": config["tsd.storage.hbase.bloom_filter"],
            "compression": config["tsd.storage.hbase.compression"]}


def data_family_options(config: Config) -> dict[str, object]:
    """A data family's options: one version, and the TTL when one is set."""
    options: dict[str, object] = {"max_versions": 1, **family_options(config)}
    if config["tsd.storage.hbase.data_ttl_s"] > 0:
        options["time_to_live"] = config["tsd.storage.hbase.data_ttl_s"]
    return options


def table_families(config: Config) -> dict[str, dict[str, dict[str, object]]]:
    """Table name -> family -> options, with names from the configuration; the rollup and
    pre-aggregate tables too when rollups are enabled (2.4's ``ensureTablesExist``)."""
    shared = family_options(config)
    one_version = {"max_versions": 1, **shared}
    data = data_family_options(config)
    rollup_tables: dict[str, dict[str, dict[str, object]]] = {}
    if config["tsd.rollups.enable"]:
        from app.tsdb.rollup_config import load_rollup_config

        rollups = load_rollup_config(config["tsd.rollups.config"])
        # No TTL: rollups usually outlive the raw points (set one per table in the shell).
        rollup_tables = {name: {"t": dict(one_version)} for name in rollups.tables()}
    return {
        config["tsd.storage.hbase.uid_table"]: {"id": dict(shared), "name": dict(shared)},
        config["tsd.storage.hbase.data_table"]: {"t": dict(data)},
        config["tsd.storage.hbase.tree_table"]: {"t": dict(one_version)},
        config["tsd.storage.hbase.meta_table"]: {"name": dict(one_version)},
        **rollup_tables,
    }


def create_tables(store: Store, config: Config) -> list[str]:
    """Create whichever of OpenTSDB's tables are missing; return the names created."""
    created = []
    for name, families in table_families(config).items():
        if store.create_table(name, families):
            created.append(name)
    return created


def ensure_tables(store: Store, config: Config) -> list[str]:
    """Create the missing tables of a store that sets itself up (the embedded one).

    Only a store missing some table writes anything, so a read-only file that has them all
    opens fine; processes racing on a new file all succeed (creation is idempotent).
    """
    if not store.sets_itself_up:
        return []
    if set(table_families(config)) <= set(store.table_names()):
        return []
    return create_tables(store, config)
