"""TreeBuilder, step for step: each expected message list and branch JSON below is what OpenTSDB
2.4.1's own TreeBuilder printed for the same tree and TSMeta (opentsdb-2.4.1.jar, test mode,
a fresh ROOT; Jackson 2.9.5, JDK 17: scripts/opentsdb/MetaJsonProbe.java). No storage is
touched in test mode."""

from __future__ import annotations

from typing import Any, cast

from app.meta.codec import TSMeta, UIDMeta
from app.meta.tree_builder import TreeBuilder, new_root
from app.meta.tree_codec import Tree, TreeRule
from app.tsdb import TSDB

TSUID = "000001000001000001"


def meta() -> TSMeta:
    return TSMeta(tsuid=TSUID,
                  metric=UIDMeta("metrics", "000001", "sys.cpu.user", custom={"owner": "ops"}),
                  tags=[UIDMeta("tagk", "000001", "host", custom={"role": "hosts"}),
                        UIDMeta("tagv", "000001", "web01", custom={"dc": "lga"})])


def run(*rules: dict[str, Any]) -> TreeBuilder:
    tree = Tree(tree_id=1)
    for rule in rules:
        tree.add_rule(TreeRule(tree_id=1, **rule))
    builder = TreeBuilder(cast(TSDB, None), tree, root=new_root(1))
    builder.process(meta(), is_testing=True)
    return builder


def test_a_split_metric() -> None:
    builder = run({"level": 0, "order": 0, "type": "METRIC", "separator": "\\."})
    assert builder.messages == [
        "Processing rule: [1:0:0:METRIC]", "Processing rule: [1:0:0:METRIC]",
        "Processing rule: [1:0:0:METRIC]",
        f"Depth [4] Adding leaf [name: user tsuid: {TSUID}] to parent branch [Name: [cpu]]",
        "Depth [3] Adding branch: Name: [cpu] to parent: Name: [sys]"]
    assert builder.root is not None
    assert builder.root.api_json() == (
        '{"leaves":null,"branches":[{"leaves":null,"branches":[{"leaves":[{"metric":"","tags"'
        ':null,"tsuid":"000001000001000001","displayName":"user"}],"branches":null,"path":{"0'
        '":"ROOT","1":"sys","2":"cpu"},"displayName":"cpu","treeId":1,"branchId":"00010001BEC'
        'D000181A8","depth":2}],"path":{"0":"ROOT","1":"sys"},"displayName":"sys","treeId":1,'
        '"branchId":"00010001BECD","depth":1}],"path":{"0":"ROOT"},"displayName":"ROOT","tree'
        'Id":1,"branchId":"0001","depth":0}')


def test_every_custom_type_regex_and_format() -> None:
    builder = run(
        {"level": 0, "order": 0, "type": "TAGV_CUSTOM", "field": "web01", "custom_field": "dc",
         "display_format": "dc-{value}"},
        {"level": 1, "order": 0, "type": "TAGK_CUSTOM", "field": "host",
         "custom_field": "missing"},
        {"level": 1, "order": 1, "type": "TAGK_CUSTOM", "field": "host", "custom_field": "role",
         "display_format": "{tag_name}:{value}"},
        {"level": 2, "order": 0, "type": "METRIC_CUSTOM", "field": "sys.cpu.user",
         "custom_field": "owner"},
        {"level": 3, "order": 0, "type": "TAGK", "field": "host", "regex": "^([a-z]+)(\\d+)",
         "regex_group_idx": 1},
        {"level": 4, "order": 0, "type": "METRIC", "regex": "\\.([a-z]+)$",
         "display_format": "{ovalue}/{value}"})
    assert builder.messages == [
        "Processing rule: [1:0:0:TAGV_CUSTOM]",
        "Matched tagv [web01] for rule: [1:0:0:TAGV_CUSTOM]",
        "Matched custom tag [dc] for rule: [1:0:0:TAGV_CUSTOM]",
        "Processing rule: [1:1:0:TAGK_CUSTOM]",
        "Matched tagk [host] for rule: [1:1:0:TAGK_CUSTOM]",
        "No match on custom tag [missing] for rule: [1:1:0:TAGK_CUSTOM]",
        "Processing rule: [1:1:1:TAGK_CUSTOM]",
        "Matched tagk [host] for rule: [1:1:1:TAGK_CUSTOM]",
        "Matched custom tag [role] for rule: [1:1:1:TAGK_CUSTOM]",
        "Processing rule: [1:2:0:METRIC_CUSTOM]",
        "Matched custom tag [owner] for rule: [1:2:0:METRIC_CUSTOM]",
        "Processing rule: [1:3:0:TAGK]", "Matched tagk [host] for rule: [1:3:0:TAGK]",
        "Processing rule: [1:4:0:METRIC]",
        f"Depth [6] Adding leaf [name: sys.cpu.user/user tsuid: {TSUID}] to parent branch "
        "[Name: [01]]",
        "Depth [5] Adding branch: Name: [01] to parent: Name: [ops]",
        "Depth [4] Adding branch: Name: [ops] to parent: Name: [role:hosts]",
        "Depth [3] Adding branch: Name: [role:hosts] to parent: Name: [dc-lga]"]
    assert builder.root is not None
    assert builder.root.api_json() == (
        '{"leaves":null,"branches":[{"leaves":null,"branches":[{"leaves":null,"branches":[{"l'
        'eaves":null,"branches":[{"leaves":[{"metric":"","tags":null,"tsuid":"000001000001000'
        '001","displayName":"sys.cpu.user/user"}],"branches":null,"path":{"0":"ROOT","1":"dc-'
        'lga","2":"role:hosts","3":"ops","4":"01"},"displayName":"01","treeId":1,"branchId":"'
        '0001B02DCBF82D1BA3C70001AEB200000601","depth":4}],"path":{"0":"ROOT","1":"dc-lga","2'
        '":"role:hosts","3":"ops"},"displayName":"ops","treeId":1,"branchId":"0001B02DCBF82D1'
        'BA3C70001AEB2","depth":3}],"path":{"0":"ROOT","1":"dc-lga","2":"role:hosts"},"displa'
        'yName":"role:hosts","treeId":1,"branchId":"0001B02DCBF82D1BA3C7","depth":2}],"path":'
        '{"0":"ROOT","1":"dc-lga"},"displayName":"dc-lga","treeId":1,"branchId":"0001B02DCBF8'
        '","depth":1}],"path":{"0":"ROOT"},"displayName":"ROOT","treeId":1,"branchId":"0001",'
        '"depth":0}')


def test_a_level_that_matches_nothing() -> None:
    builder = run({"level": 0, "order": 0, "type": "TAGK", "field": "dc"},
                  {"level": 1, "order": 0, "type": "TAGK", "field": "host"},
                  {"level": 2, "order": 0, "type": "METRIC"})
    assert builder.messages == [
        "Processing rule: [1:0:0:TAGK]", "No match on tagk [dc] for rule: [1:0:0:TAGK]",
        "Processing rule: [1:1:0:TAGK]", "Matched tagk [host] for rule: [1:1:0:TAGK]",
        "Processing rule: [1:2:0:METRIC]",
        f"Depth [4] Adding leaf [name: sys.cpu.user tsuid: {TSUID}] to parent branch "
        "[Name: [web01]]",
        "Depth [3] Skipping a non-matched branch, returning: Name: [web01]"]
    assert builder.root is not None
    assert builder.root.api_json() == (
        '{"leaves":null,"branches":[{"leaves":[{"metric":"","tags":null,"tsuid":"000001000001'
        '000001","displayName":"sys.cpu.user"}],"branches":null,"path":{"0":"ROOT","1":"web01'
        '"},"displayName":"web01","treeId":1,"branchId":"000106BC4C55","depth":1}],"path":{"0'
        '":"ROOT"},"displayName":"ROOT","treeId":1,"branchId":"0001","depth":0}')
