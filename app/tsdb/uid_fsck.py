"""``pytsd uid fsck``: OpenTSDB's ``UidManager fsck`` over the ``tsdb-uid`` table.

One scan reads every forward (name -> UID), reverse (UID -> name) and MAXID cell, then per kind:

- a forward mapping without its reverse (harmful: the UID's name cannot be resolved): the
  fix writes the reverse;
- a forward mapping whose reverse names another name: when one name alone holds the UID the
  fix rewrites the reverse; when several names share one UID (a collision: their series are
  mixed), every such forward mapping is deleted and the UID is renamed
  ``fsck.<name1>.<name2>...`` so the old data stays visible and new names get fresh UIDs;
- a reverse mapping without a forward one (an orphan, e.g. a UID assigned by a put that then
  failed; harmless) or one disagreeing with the forward mapping: the fix deletes it;
- a UID above the MAXID counter (future UIDs would be assigned twice): the fix raises the
  counter to it. OpenTSDB skips this check when MAXID exceeds the number of mappings; pytsd
  always makes it.

Without ``fix`` nothing is written. The report also counts, per kind, the UIDs MAXID gave
out that name nothing (``burned``: races lost, puts that failed, names deleted), beside the
names that hold one: the waste concurrent creation costs, fleet-wide (Java TSDs included).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from app.storage.base import Table
from app.tsdb import TSDB
from app.tsdb.uid import ID_FAMILY, KINDS, MAXID_ROW, NAME_FAMILY


@dataclass
class FsckReport:
    """What fsck found (``errors``: harmful; ``warnings``: harmless) and what it wrote."""

    cells: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    burned: dict[str, int] = field(default_factory=dict)

    def waste_lines(self) -> list[str]:
        """Per kind: names, MAXID, UIDs burned and burned per name."""
        return [f"{kind}: {names} names, {names + self.burned[kind]} UIDs taken, "
                f"{self.burned[kind]} burned ({self.burned[kind] / max(names, 1):.3f} per name)"
                for kind, names in self.names.items()]


@dataclass
class _Kind:
    kind: str
    width: int
    name2id: dict[str, bytes] = field(default_factory=dict)
    id2name: dict[bytes, str] = field(default_factory=dict)
    max_id: int = 0
    max_found: int = 0

    def column(self, family: bytes) -> bytes:
        return family + b":" + self.kind.encode()


def fsck(tsdb: TSDB, fix: bool = False) -> FsckReport:
    """Check (and with ``fix`` repair) every kind's mappings; see the module docstring."""
    table = tsdb.uid_table()
    kinds = {kind: _Kind(kind, tsdb.uids[kind].width) for kind in KINDS}
    report = FsckReport()
    _load(table, kinds, report)
    for kind, maps in kinds.items():
        report.names[kind] = len(maps.name2id)
        report.burned[kind] = max(0, maps.max_id - len(maps.name2id))
    for maps in kinds.values():
        checker = _Checker(table, maps, report, fix)
        checker.forward()
        checker.reverse()
        checker.max_id()
    return report


def _load(table: Table, kinds: dict[str, _Kind], report: FsckReport) -> None:
    for row, cells in table.scan():
        for column, value in cells.items():
            family, _, qualifier = column.partition(b":")
            maps = kinds.get(qualifier.decode("utf-8", errors="replace"))
            if maps is None:
                continue  # meta columns (``metrics_meta``) and the like
            report.cells += 1
            if family == ID_FAMILY and row == MAXID_ROW:
                if len(value) != 8:
                    report.errors.append(f"Invalid maximum ID for {maps.kind}: should be on "
                                         f"8 bytes: {value.hex().upper()}")
                else:
                    maps.max_id = int.from_bytes(value, "big", signed=True)
            elif family == ID_FAMILY:
                name = row.decode("utf-8", errors="replace")
                if len(value) != maps.width:
                    report.errors.append(f"Invalid {maps.kind} ID of length {len(value)} "
                                         f"(expected {maps.width}): {name} -> {value.hex()}")
                    continue
                maps.name2id[name] = value
                maps.max_found = max(maps.max_found, int.from_bytes(value, "big"))
            elif family == NAME_FAMILY:
                maps.id2name[row] = value.decode("utf-8", errors="replace")


class _Checker:
    def __init__(self, table: Table, maps: _Kind, report: FsckReport, fix: bool) -> None:
        self.table, self.maps, self.report, self.fix = table, maps, report, fix
        self.kind = maps.kind

    def _restore_reverse(self, name: str, uid: bytes) -> None:
        self.table.put(uid, {self.maps.column(NAME_FAMILY): name.encode("utf-8")})
        self.maps.id2name[uid] = name
        self.report.fixes.append(f"Restored reverse {self.kind} mapping {uid.hex().upper()} "
                                 f"-> {name}")

    def _remove_reverse(self, name: str, uid: bytes) -> None:
        self.table.delete(uid, [self.maps.column(NAME_FAMILY)])
        self.report.fixes.append(f"Removed reverse {self.kind} mapping {uid.hex().upper()} "
                                 f"-> {name}")

    def forward(self) -> None:
        """Forward mappings against the reverse ones; collisions renamed last."""
        maps, errors = self.maps, self.report.errors
        shared: dict[bytes, list[str]] = defaultdict(list)
        for name, uid in maps.name2id.items():
            shared[uid].append(name)
        for name, uid in list(maps.name2id.items()):
            found = maps.id2name.get(uid)
            hex_id = uid.hex().upper()
            if found is None:
                errors.append(f"Forward {self.kind} mapping is missing reverse mapping: "
                              f"{name} -> {hex_id}")
                if self.fix:
                    self._restore_reverse(name, uid)
            elif found != name:
                errors.append(f"Forward {self.kind} mapping {name} -> {hex_id} is different "
                              f"than reverse mapping: {hex_id} -> {found}")
                if self.fix and len(shared[uid]) == 1:
                    self._restore_reverse(name, uid)
        for uid, names in shared.items():
            if len(names) > 1:
                errors.append(f"UID collision: {self.kind} {uid.hex().upper()} is mapped from "
                              f"{', '.join(sorted(names))}")
                if self.fix:
                    self._rename_collision(uid, sorted(names))

    def _rename_collision(self, uid: bytes, names: list[str]) -> None:
        for name in names:
            self.table.delete(name.encode("utf-8"), [self.maps.column(ID_FAMILY)])
            del self.maps.name2id[name]
            self.report.fixes.append(f"Removed forward {self.kind} mapping {name} -> "
                                     f"{uid.hex().upper()}")
        renamed = ".".join(["fsck", *names])
        self.table.put(renamed.encode("utf-8"), {self.maps.column(ID_FAMILY): uid})
        self.maps.name2id[renamed] = uid
        self.report.fixes.append(f"Renamed {self.kind} UID {uid.hex().upper()} to {renamed}")
        self._restore_reverse(renamed, uid)

    def reverse(self) -> None:
        """Reverse mappings without (or disagreeing with) a forward one are deleted."""
        maps = self.maps
        for uid, name in list(maps.id2name.items()):
            found = maps.name2id.get(name)
            hex_id = uid.hex().upper()
            if found == uid:
                continue
            if found is None:
                self.report.warnings.append(f"Reverse {self.kind} mapping is missing forward "
                                            f"mapping: {name} -> {hex_id}")
            else:
                self.report.errors.append(
                    f"Inconsistent reverse {self.kind} mapping {hex_id} -> {name} vs "
                    f"{found.hex().upper()} -> {name}")
            if self.fix:
                self._remove_reverse(name, uid)
                del maps.id2name[uid]

    def max_id(self) -> None:
        maps = self.maps
        entries = max(len(maps.id2name), len(maps.name2id))
        if maps.max_id > entries:
            self.report.warnings.append(
                f"Max ID for {self.kind} is {maps.max_id} but only {entries} entries were "
                f"found.  Maybe {maps.max_id - entries} IDs were deleted?")
        if maps.max_id < maps.max_found:
            self.report.errors.append(
                f"We found an ID of {maps.max_found} for {self.kind} but the max ID is only "
                f"{maps.max_id}!  Future IDs may be double-assigned!")
            if self.fix:
                self.table.counter_inc(MAXID_ROW, maps.column(ID_FAMILY),
                                       maps.max_found - maps.max_id)
                self.report.fixes.append(f"Updated max ID for {self.kind} to {maps.max_found}")
