"""The ``exp=`` parser: OpenTSDB 2.4's grammar (src/parser.jj) and its error messages."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.query.gexp import Call, MetricLeaf, parse_expression, parse_expressions

NAMES = {"scale", "sumSeries", "alias", "absolute"}


def parse(text: str) -> tuple[Call, list[str]]:
    leaves: list[str] = []
    return parse_expression(text, NAMES, leaves), leaves


def test_leaves_parameters_and_nesting() -> None:
    tree, leaves = parse("scale( sumSeries(sum:1m-avg:a.b{host=*, dc=lga},max:rate:c) , 2 )")
    assert tree == Call("scale", (
        Call("sumSeries", (MetricLeaf("sum:1m-avg:a.b{host=*,dc=lga}", 0),
                           MetricLeaf("max:rate:c", 1))), "2"))
    assert leaves == ["sum:1m-avg:a.b{host=*,dc=lga}", "max:rate:c"]
    assert tree.params == ["2"] and [i for i, _ in tree.series_args] == [0]


def test_metric_with_interval_and_rate_and_quoted_names() -> None:
    tree, leaves = parse("alias(sum:1h-sum:rate:m.x{host=web01|web02},'quoted',@host.x)")
    assert leaves == ["sum:1h-sum:rate:m.x{host=web01|web02}"]
    assert tree.params == ["'quoted'", "@host.x"]


def test_leaf_indexes_run_across_expressions() -> None:
    trees, leaves = parse_expressions(["absolute(sum:a)", "sumSeries(sum:b,sum:a)"], NAMES)
    assert leaves == ["sum:a", "sum:b", "sum:a"]
    assert trees[1].args == (MetricLeaf("sum:b", 1), MetricLeaf("sum:a", 2))


def test_text_after_the_expression_is_ignored() -> None:
    tree, leaves = parse("absolute(sum:a) and ~ anything")
    assert tree == Call("absolute", (MetricLeaf("sum:a", 0),)) and leaves == ["sum:a"]


@pytest.mark.parametrize("text", [
    "", " ", "scale:a", "scale()", "scale(sum:a,2", "scale(sum:a,,2)",
    "scale(sum:a{host=*}{dc=*},2)",
    "scale(sum:1m-avg:rate:a:b,2)", "scale(sum:a{host},2)", "scale(sum:a~,2)", "scale(sum:a%,2)",
    "scale(sum:a{host=wildcard(x*)},2)", "(sum:a)",
])
def test_syntax_errors(text: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse(text)
    assert caught.value.message == f"Failed to parse {text}"


def test_unknown_function_named_as_soon_as_read() -> None:
    with pytest.raises(BadRequestError) as caught:
        parse("scale(highestMin(sum:a,2),3)")
    assert caught.value.message == "Function highestMin has not been implemented"


def test_deep_nesting_is_a_clear_error() -> None:
    text = "absolute(" * 65 + "sum:a" + ")" * 65
    with pytest.raises(BadRequestError) as caught:
        parse(text)
    assert caught.value.message.startswith("Failed to parse absolute(")
    assert caught.value.details == "calls nested deeper than 64"
    assert parse("absolute(" * 64 + "sum:a" + ")" * 64)[1] == ["sum:a"]
