"""The JEXL subset parser and Java's hash-map iteration order (pure)."""

from __future__ import annotations

import pytest

from app.jackson import java_hashmap_iteration, java_string_hash
from app.query.expression.jexl import ExpressionSyntaxError, Node, parse, variables


def shape(node: Node) -> object:
    """A compact, readable form of a tree: numbers, names, (op, args...)."""
    if node.op == "num":
        return node.value
    if node.op == "var":
        return node.name
    return (node.op, *(shape(a) for a in node.args))


@pytest.mark.parametrize("text, expected", [
    ("a + b * 2", ("+", "a", ("*", "b", 2.0))),
    ("(a + b) * 2", ("*", ("+", "a", "b"), 2.0)),
    ("a - b - c", ("-", ("-", "a", "b"), "c")),
    ("a / b % c", ("%", ("/", "a", "b"), "c")),
    ("-a * b", ("*", ("neg", "a"), "b")),
    ("-2 + a", ("+", -2.0, "a")),
    ("a > 1 && b < 2 || !c", ("||", ("&&", (">", "a", 1.0), ("<", "b", 2.0)), ("!", "c"))),
    ("a == b != c", ("!=", ("==", "a", "b"), "c")),
    ("a lt b and b ge c or not a", ("||", ("&&", ("<", "a", "b"), (">=", "b", "c")),
                                    ("!", "a"))),
    ("a div b mod c", ("%", ("/", "a", "b"), "c")),
    ("a > b ? a : b", ("?", (">", "a", "b"), "a", "b")),
    ("a ? b ? 1 : 2 : 3", ("?", "a", ("?", "b", 1.0, 2.0), 3.0)),
    ("a ?: 0", ("?:", "a", 0.0)),
    ("true + a", ("+", 1.0, "a")),
])
def test_precedence_and_associativity(text: str, expected: object) -> None:
    assert shape(parse(text)) == expected


def test_literal_kinds() -> None:
    assert (parse("2").kind, parse("2.5").kind, parse("false").kind) == ("int", "float", "bool")
    # A Float literal is widened through its shortest text: 0.1 stays 0.1, more digits round
    assert parse("0.1").value == 0.1
    assert parse("0.123456789").value == 0.12345679


@pytest.mark.parametrize("text, column", [
    ("a +", 4), ("(a * 2", 7), ("a & b", 3), ("a = 1", 3), ("a b", 3), ("'x'", 1),
    ("size(a)", 1), ("a;b", 2), ("", 1), ("a ? b", 6),
])
def test_outside_the_subset_is_a_syntax_error(text: str, column: int) -> None:
    with pytest.raises(ExpressionSyntaxError) as caught:
        parse(text)
    assert caught.value.column == column
    assert f"parsing error in '{text}'" in str(caught.value)


def test_variables_first_use_first_once() -> None:
    assert variables(parse("b * a + b - c1")) == ["b", "a", "c1"]
    assert variables(parse("1 + 2")) == []


def test_string_hash_is_javas() -> None:
    # Values of "...".hashCode() in Java
    assert java_string_hash("host") == 3208616
    assert java_string_hash("dc") == 3199
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("") == 0


def test_hashmap_order() -> None:
    # OpenTSDB 2.4.1 printed commonTags {"host": ..., "dc": ...} for tags dc, host
    assert java_hashmap_iteration(["dc", "host"]) == ["host", "dc"]
    # one-letter keys sit in the bucket of their code point
    assert java_hashmap_iteration(["c", "a", "b"]) == ["a", "b", "c"]
    # "a" (97) and "q" (113) share bucket 1 of 16 (and of 4): insertion order decides;
    # "b" (98) is in bucket 2
    assert java_hashmap_iteration(["q", "a"]) == ["q", "a"]
    assert java_hashmap_iteration(["q", "a"], 2) == ["q", "a"]
    assert java_hashmap_iteration(["b", "a"], 2) == ["a", "b"]


@pytest.mark.parametrize("text", ["(" * 5000 + "a" + ")" * 5000, "-" * 5000 + "a",
                                  " + ".join(["a"] * 5000), "a ? " * 3000 + "1" + " : 2" * 3000])
def test_hostile_nesting_is_a_syntax_error_not_a_crash(text: str) -> None:
    with pytest.raises(ExpressionSyntaxError, match="nested too deeply"):
        parse(text)


def test_reasonable_nesting_parses() -> None:
    assert shape(parse("(" * 30 + "a" + ")" * 30)) == "a"
    names = [f"v{i}" for i in range(150)]
    assert variables(parse(" + ".join(names))) == names
