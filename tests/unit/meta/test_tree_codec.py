"""tsdb-tree cells byte for byte. Branch IDs are the examples of OpenTSDB's /api/tree/branch
documentation (tree 1, ROOT/sys/cpu/mboard). The JSON strings are what OpenTSDB 2.4.1's own
classes printed (opentsdb-2.4.1.jar, its JSON helper, Jackson 2.9.5, JDK 17: toStorageJson and
JSON.serializeToBytes of a Tree, TreeRule, Branch and Leaf built the same way:
scripts/opentsdb/MetaJsonProbe.java)."""

from __future__ import annotations

import re

from app.meta.tree_codec import Branch, Leaf, Tree, TreeRule, java_split, rule_qualifier


def test_branch_ids_match_opentsdbs_documentation() -> None:
    root = Branch(tree_id=1, display_name="ROOT", path={0: "ROOT"})
    assert root.branch_id() == bytes.fromhex("0001")
    sys_branch = Branch(tree_id=1, display_name="sys", path={0: "ROOT"})
    assert sys_branch.branch_id().hex().upper() == "00010001BECD"
    cpu = Branch(tree_id=1, display_name="cpu", path={0: "ROOT", 1: "sys"})
    assert cpu.branch_id().hex().upper() == "00010001BECD000181A8"
    mboard = Branch(tree_id=1, display_name="mboard", path={0: "ROOT", 1: "sys", 2: "cpu"})
    assert mboard.branch_id().hex().upper() == "00010001BECD000181A8BF992A99"
    assert cpu.storage_json() == b'{"path":{"0":"ROOT","1":"sys","2":"cpu"},"displayName":"cpu"}'


def test_branch_api_json() -> None:
    cpu = Branch(tree_id=1, display_name="cpu", path={0: "ROOT", 1: "sys"})
    cpu.add_leaf(Leaf("user", "000001000001000001"), None)
    assert cpu.api_json() == (
        '{"leaves":[{"metric":"","tags":null,"tsuid":"000001000001000001","displayName":"user"}],'
        '"branches":null,"path":{"0":"ROOT","1":"sys","2":"cpu"},"displayName":"cpu",'
        '"treeId":1,"branchId":"00010001BECD000181A8","depth":2}')


def test_leaf_cell() -> None:
    leaf = Leaf("user", "000001000001000001")
    # "user".hashCode() = 3599307 = 0x0036EBCB
    assert leaf.qualifier() == b"leaf:\x00\x36\xeb\xcb"
    assert leaf.storage_json() == b'{"displayName":"user","tsuid":"000001000001000001"}'


def test_tree_and_rule_json() -> None:
    rule = TreeRule(tree_id=1, level=0, order=0, type="TAGK", field="host",
                    description="Hostname rule")
    assert rule.json_text() == (
        '{"type":"TAGK","field":"host","regex":"","separator":"","description":"Hostname rule",'
        '"notes":"","level":0,"order":0,"treeId":1,"customField":"","regexGroupIdx":0,'
        '"displayFormat":""}')
    assert rule_qualifier(1, 0) == b"tree_rule:1:0"
    assert str(rule) == "[1:0:0:TAGK]"
    tree = Tree(tree_id=1, name="Test Tree", created=1356998400)
    assert tree.storage_json() == (
        b'{"name":"Test Tree","description":"","notes":"","strictMatch":false,'
        b'"created":1356998400,"enabled":false,"storeFailures":false}')
    tree.add_rule(rule)
    assert tree.api_json() == (
        '{"name":"Test Tree","description":"","notes":"","enabled":false,"rules":{"0":{"0":'
        + rule.json_text() + '}},"created":1356998400,"treeId":1,"strictMatch":false,'
        '"storeFailures":false}')
    assert Tree(tree_id=2).api_json().startswith(
        '{"name":"","description":"","notes":"","enabled":false,"rules":null,')


def test_java_split() -> None:
    dot = re.compile(r"\.")
    assert java_split(dot, "sys.cpu.user") == ["sys", "cpu", "user"]
    assert java_split(dot, "a..b.") == ["a", "", "b"]
    assert java_split(dot, ".a") == ["", "a"]
    assert java_split(dot, "...") == []
    assert java_split(dot, "plain") == ["plain"]
    assert java_split(re.compile(""), "abc") == ["a", "b", "c"]
