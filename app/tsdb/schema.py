"""OpenTSDB's four tables and their column families, as ``create_table.sh`` makes them."""

from __future__ import annotations

from app.config import Config
from app.storage.base import Store

DATA_FAMILY = b"t"

# create_table.sh: tsdb-uid has families id and name, tsdb has t, tsdb-tree t, tsdb-meta name;
# VERSIONS 1 everywhere but the UID table, BLOOMFILTER ROW, compression configurable (NONE here).
# Options a family leaves out get HBase's own defaults (VERSIONS 1, block cache on): the HBase
# backend fills them in, because Thrift1's column descriptor defaults differ.
UID_FAMILY_OPTIONS = {"bloom_filter_type": "ROW", "compression": "NONE"}
FAMILY_OPTIONS = {"max_versions": 1, **UID_FAMILY_OPTIONS}


def table_families(config: Config) -> dict[str, dict[str, dict[str, object]]]:
    """Table name -> family -> options, with names from the configuration; the rollup and
    pre-aggregate tables too when rollups are enabled (2.4's ``ensureTablesExist``)."""
    rollup_tables: dict[str, dict[str, dict[str, object]]] = {}
    if config["tsd.rollups.enable"]:
        from app.tsdb.rollup_config import load_rollup_config

        rollups = load_rollup_config(config["tsd.rollups.config"])
        rollup_tables = {name: {"t": dict(FAMILY_OPTIONS)} for name in rollups.tables()}
    return {
        config["tsd.storage.hbase.uid_table"]: {"id": dict(UID_FAMILY_OPTIONS),
                                               "name": dict(UID_FAMILY_OPTIONS)},
        config["tsd.storage.hbase.data_table"]: {"t": dict(FAMILY_OPTIONS)},
        config["tsd.storage.hbase.tree_table"]: {"t": dict(FAMILY_OPTIONS)},
        config["tsd.storage.hbase.meta_table"]: {"name": dict(FAMILY_OPTIONS)},
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
