"""Running a TSMeta through a tree's rules (OpenTSDB 2.4's ``TreeBuilder``), step for step.

Rules are grouped by level; the rules of a level are ORed (the first that yields a name wins).
A rule takes the metric name, a tag value (``TAGK``: the value of the tag key ``field``), or a
``custom`` field of the metric's, a tag key's or a tag value's UIDMeta (``*_CUSTOM``:
``customField`` of the UID named ``field``), then: a ``regex`` (group ``regexGroupIdx`` + 1 of
the first match), or a ``separator`` (a regex: each part becomes one more level), or the value
as is; ``displayFormat`` may wrap it (``{ovalue}``, ``{value}``, ``{tsuid}``, ``{tag_name}``).
The last name is the leaf, the ones before it branches under ``ROOT``. The recursion below keeps
OpenTSDB's shape so its corner cases (levels that match nothing, repeated names) come out the
same.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from dataclasses import dataclass, field

from app.meta.codec import TSMeta, UIDMeta
from app.meta.store import load_ts_meta, scan_ts_metas
from app.meta.tree_codec import Branch, Leaf, Tree, TreeRule, java_split, tree_id_bytes
from app.meta.trees import fetch_all_trees, fetch_branch_only, flush_collisions, store_branch
from app.tsdb import TSDB

ROOT_NAME = "ROOT"


def new_root(tree_id: int) -> Branch:
    return Branch(tree_id=tree_id, display_name=ROOT_NAME, path={0: ROOT_NAME})


def load_or_initialize_root(tsdb: TSDB, tree_id: int, is_testing: bool) -> Branch:
    """The stored root branch, or a new one (stored unless testing)."""
    root = fetch_branch_only(tsdb, tree_id_bytes(tree_id))
    if root is not None:
        return root
    root = new_root(tree_id)
    if not is_testing:
        store_branch(tsdb, root, None, True)
    return new_root(tree_id)


@dataclass
class TreeBuilder:
    tsdb: TSDB
    tree: Tree
    root: Branch | None = None
    messages: list[str] = field(default_factory=list)
    collisions: dict[str, str] = field(default_factory=dict)
    # Per-run state (``resetState``).
    _meta: TSMeta | None = None
    _splits: list[str] | None = None
    _rule_idx: int = 0
    _split_idx: int = 0
    _current: Branch | None = None
    _rule: TreeRule | None = None
    _not_matched: str | None = None
    _processed: set[bytes] = field(default_factory=set)

    @property
    def max_rule_level(self) -> int:
        return max(self.tree.rules) if self.tree.rules else 0

    def process(self, meta: TSMeta, is_testing: bool = False) -> None:
        """``processTimeseriesMeta``: build the path of ``meta`` and store it (unless
        testing: then :attr:`root` holds the result and :attr:`messages` the steps)."""
        self._reset(meta)
        if self.root is None:
            self.root = load_or_initialize_root(self.tsdb, self.tree.tree_id, is_testing)
        root = self.root
        self._process_ruleset(root, 1)
        if self._not_matched and self.tree.strict_match:
            # OpenTSDB 2.4 means to record the TSUID as not matched here, but its check reads
            # an empty map, so nothing is ever stored: the same here.
            self._message(f"TSUID failed to match one or more rule levels, will not add: "
                          f"{meta.tsuid}")
        elif self._current is None:
            return
        elif not is_testing:
            self._store_path(root, self._current)
            if self.collisions:
                flush_collisions(self.tsdb, self.tree, self.collisions)
        else:
            root.add_child(self._current)
            self._link_paths(root, self._current)

    def _store_path(self, root: Branch, first: Branch) -> None:
        branch: Branch | None = first
        branch.prepend_parent_path(root.compiled_path())  # type: ignore[union-attr]
        while branch is not None:
            branch_id = branch.branch_id()
            if branch.leaves is not None or branch_id not in self._processed:
                store_branch(self.tsdb, branch, self.collisions, True)
                self._processed.add(branch_id)
            if not branch.branches:
                break
            child = branch.branches[0]  # one child per level when building one path
            child.prepend_parent_path(branch.compiled_path())
            branch = child

    @staticmethod
    def _link_paths(root: Branch, first: Branch) -> None:
        branch: Branch | None = first
        branch.prepend_parent_path(root.compiled_path())  # type: ignore[union-attr]
        while branch is not None and branch.branches:
            child = branch.branches[0]
            child.prepend_parent_path(branch.compiled_path())
            branch = child

    def _reset(self, meta: TSMeta) -> None:
        self._meta, self._splits, self._rule_idx, self._split_idx = meta, None, 0, 0
        self._current, self._rule, self._not_matched = None, None, None
        if self.root is not None and self.root.branches is not None:
            self.root.branches.clear()
        # OpenTSDB clears a copy of the root's leaves, so they stay: the same here.
        self.messages = []

    def _message(self, text: str) -> None:
        self.messages.append(text)

    # --- the recursion (``processRuleset``) ---------------------------------------------

    def _process_ruleset(self, parent: Branch, depth: int) -> bool:
        if self._rule_idx > self.max_rule_level:
            return True
        previous = self._current
        self._current = Branch(tree_id=self.tree.tree_id)
        level = self._fetch_rule_level()
        if level is None:
            return True
        self._match_level(level)
        if self._splits is not None and self._split_idx >= len(self._splits):
            self._splits, self._split_idx = None, 0
            self._rule_idx += 1
        elif self._splits is None:
            self._rule_idx += 1
        depth += 1
        complete = self._process_ruleset(self._current, depth)
        if complete:
            return self._unwind_complete(parent, previous, depth)
        return self._unwind(parent, previous, depth)

    def _match_level(self, level: dict[int, TreeRule]) -> None:
        """The rules of a level are ORed: the first one that yields a name wins."""
        current = self._current
        assert current is not None
        for _, rule in sorted(level.items()):
            self._rule = rule
            self._message(f"Processing rule: {rule}")
            self._apply(rule)
            if current.display_name:
                return
        self._not_matched = (str(self._rule) if self._not_matched is None
                             else f"{self._not_matched} {self._rule}")

    def _unwind_complete(self, parent: Branch, previous: Branch | None, depth: int) -> bool:
        """The rules ran out below: this level's name is the leaf (or nothing matched)."""
        current = self._current
        if current is None or not current.display_name:
            self._current = previous
            return True
        if not parent.display_name:
            self._message(f"Depth [{depth}] Parent branch was empty, rolling back")
            return True
        assert self._meta is not None
        leaf = Leaf(display_name=current.display_name, tsuid=self._meta.tsuid)
        parent.add_leaf(leaf, self.collisions)
        self._message(f"Depth [{depth}] Adding leaf [{leaf}] to parent branch [{parent}]")
        self._current = previous
        return False

    def _unwind(self, parent: Branch, previous: Branch | None, depth: int) -> bool:
        """A deeper level made the leaf: this level's name is a branch on the path."""
        current = self._current
        assert current is not None
        if (previous is None or not previous.display_name) and current.display_name:
            if depth > 2:
                self._message(f"Depth [{depth}] Skipping a non-matched branch, returning: "
                              f"{current}")
            return False
        if not current.display_name:
            self._message(f"Depth [{depth}] Branch was empty")
            self._current = previous
            return False
        if previous is not None and current.display_name == previous.display_name:
            self._message(f"Depth [{depth}] Current was the same as previous")
            return False
        parent.add_child(current)
        self._message(f"Depth [{depth}] Adding branch: {current} to parent: {parent}")
        self._current = previous
        return False

    def _fetch_rule_level(self) -> dict[int, TreeRule] | None:
        rules = self.tree.rules or {}
        while self._rule_idx <= self.max_rule_level:
            level = rules.get(self._rule_idx)
            if level is not None:
                return level
            self._rule_idx += 1
        return None

    # --- the rule types -------------------------------------------------------------------

    def _apply(self, rule: TreeRule) -> None:
        meta = self._meta
        assert meta is not None and meta.metric is not None
        tags = meta.tags or []
        if rule.type == "METRIC":
            self._parsed(meta.metric.name)
        elif rule.type == "TAGK":
            value = _tag_value(tags, rule.field)
            if value is None:
                self._message(f"No match on tagk [{rule.field}] for rule: {rule}")
                return
            self._message(f"Matched tagk [{rule.field}] for rule: {rule}")
            self._parsed(value)
        elif rule.type == "METRIC_CUSTOM":
            self._custom(meta.metric.custom, "metric")
        else:
            kind = "tagk" if rule.type == "TAGK_CUSTOM" else "tagv"
            uid = next((t for t in tags if t.kind == kind and t.name == rule.field), None)
            if uid is None:
                self._message(f"No match on {kind} [{rule.field}] for rule: {rule}")
                return
            self._message(f"Matched {kind} [{rule.field}] for rule: {rule}")
            self._custom(uid.custom, kind)

    def _custom(self, custom: dict[str, str] | None, _kind: str) -> None:
        rule = self._rule
        assert rule is not None
        if custom is not None and rule.custom_field in custom:
            self._parsed(custom[rule.custom_field])
            self._message(f"Matched custom tag [{rule.custom_field}] for rule: {rule}")
        else:
            self._message(f"No match on custom tag [{rule.custom_field}] for rule: {rule}")

    def _parsed(self, value: str) -> None:
        """``processParsedValue``: a regex, else a split, else the value itself."""
        rule = self._rule
        assert rule is not None
        if rule.regex:
            self._regex(rule, value)
        elif rule.separator:
            self._split(rule, value)
        else:
            self._set_name(value, value)

    def _split(self, rule: TreeRule, value: str) -> None:
        if self._splits is None:
            self._splits = java_split(re.compile(rule.separator), value)
            if not self._splits:
                self._message(f"Separator did not match, created an empty list on rule: {rule}")
                self._split_idx = 1
                return
            self._split_idx = 0
        self._set_name(value, self._splits[self._split_idx])
        self._split_idx += 1

    def _regex(self, rule: TreeRule, value: str) -> None:
        match = re.compile(rule.regex).search(value)
        if match is None:
            return
        groups = len(match.groups())
        if groups >= rule.regex_group_idx + 1:
            extracted = match.group(rule.regex_group_idx + 1)
            if not extracted:
                self._message(f"Extracted value for rule {rule} was null or empty")
            else:
                self._set_name(value, extracted)
        else:
            self._message(f"Regex group index [{rule.regex_group_idx}] for rule {rule} was out "
                          f"of bounds [{groups}]")

    def _set_name(self, original: str, extracted: str) -> None:
        rule, current, meta = self._rule, self._current, self._meta
        assert rule is not None and current is not None and meta is not None
        fmt = rule.display_format
        if not fmt:
            current.display_name = extracted
            return
        fmt = fmt.replace("{ovalue}", original).replace("{value}", extracted)
        fmt = fmt.replace("{tsuid}", meta.tsuid)
        if "{tag_name}" in fmt:
            if rule.type == "TAGK":
                fmt = fmt.replace("{tag_name}", rule.field)
            elif rule.type in ("METRIC_CUSTOM", "TAGK_CUSTOM", "TAGV_CUSTOM"):
                fmt = fmt.replace("{tag_name}", rule.custom_field)
            else:
                fmt = fmt.replace("{tag_name}", "")
                self._message(f"Display rule {rule} was of the wrong type to match on "
                              "{tag_name}")
        current.display_name = fmt


def _tag_value(tags: list[UIDMeta], tagk: str) -> str | None:
    """The value after the tag key named ``tagk`` in ``[tagk, tagv, ...]`` UIDMetas."""
    found = False
    for uid in tags:
        if uid.kind == "tagk" and uid.name == tagk:
            found = True
        elif uid.kind == "tagv" and found:
            return str(uid.name) or None
    return None


# The enabled trees each process last loaded, and when: ``processAllTrees`` reloads them every
# five minutes (loading scans the whole tree table), so a new or edited tree takes effect on
# new series within five minutes, as in OpenTSDB.
TREE_RELOAD_S = 300
_loaded_trees: weakref.WeakKeyDictionary[TSDB, tuple[float, list[Tree]]] = (
    weakref.WeakKeyDictionary())
_trees_lock = threading.Lock()


def enabled_trees(tsdb: TSDB) -> list[Tree]:
    with _trees_lock:
        loaded = _loaded_trees.get(tsdb)
        if loaded is None or time.monotonic() - loaded[0] > TREE_RELOAD_S:
            trees = [t for t in fetch_all_trees(tsdb) if t.enabled and t.rules]
            loaded = _loaded_trees[tsdb] = (time.monotonic(), trees)
        return loaded[1]


def process_through_trees(tsdb: TSDB, meta: TSMeta) -> int:
    """``processAllTrees``: a new TSMeta through every enabled tree; the trees it entered."""
    trees = enabled_trees(tsdb)
    for tree in trees:
        TreeBuilder(tsdb, tree).process(meta)
    return len(trees)


def attach_tree_processing(tsdb: TSDB) -> None:
    """Every TSMeta this process stores goes through the enabled trees, when
    ``tsd.core.tree.enable_processing`` is on (``TSDB.new_ts_meta`` calls it)."""
    if tsdb.config["tsd.core.tree.enable_processing"]:
        tsdb.tree_processor = lambda tsuid: process_new_ts_meta(tsdb, tsuid)


def process_new_ts_meta(tsdb: TSDB, tsuid: bytes) -> int:
    """``processTSMetaThroughTrees`` for a TSMeta just stored, when processing is on."""
    if not tsdb.config["tsd.core.tree.enable_processing"]:
        return 0
    meta = load_ts_meta(tsdb, tsuid)
    return process_through_trees(tsdb, meta) if meta is not None else 0


def treesync(tsdb: TSDB) -> tuple[int, int]:
    """``uid treesync``: every stored TSMeta through every enabled tree (one builder per tree,
    as ``TreeSync`` runs it); returns (TSMeta objects, trees)."""
    trees = [t for t in fetch_all_trees(tsdb) if t.enabled and t.rules]
    builders = [TreeBuilder(tsdb, tree) for tree in trees]
    count = 0
    for meta in scan_ts_metas(tsdb, None):
        count += 1
        for builder in builders:
            builder.process(meta)
    return count, len(builders)
