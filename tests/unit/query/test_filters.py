"""Tag value filters: spec §2.5, §2.6, §7.3 and §9 A.12-13, cases from OpenTSDB's
``test/query/filter/TestTagV*Filter.java``."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.query.ast import Filter
from app.query.filters import (
    FILTERS,
    add_filters,
    build_filter,
    compile_filters,
    config_filters,
    filter_from_tag,
    group_by_keys,
    merge_filters,
    series_matches,
)

# TestTagVWildcardFilter's value.
OGG = "ogg-01.ops.ankh.morpork.com"

# Spec §9 data set D7 (docs:user_guide/query/filters.rst.txt), numbered as in the spec.
D7 = {
    1: {"dc": "dal", "host": "web01"},
    2: {"dc": "dal", "host": "web02"},
    3: {"dc": "dal", "host": "web03"},
    4: {"host": "web01"},
    5: {"host": "web01", "owner": "jdoe"},
    6: {"dc": "lax", "host": "web01"},
    7: {"dc": "lax", "host": "web02"},
}


def matching(filters: list[Filter], explicit_tags: bool = False) -> list[int]:
    compiled = compile_filters(filters)
    return [n for n, tags in D7.items() if series_matches(tags, compiled, explicit_tags)]


def tags(text: str, group_by: bool = True) -> list[Filter]:
    return [filter_from_tag(*pair.split("=", 1), group_by=group_by) for pair in text.split(",")]


def test_registry_names() -> None:
    # §7.3: OpenTSDB registers seven; not_key is documented but unregistered there.
    assert set(FILTERS) == {"literal_or", "iliteral_or", "not_literal_or", "not_iliteral_or",
                            "regexp", "wildcard", "iwildcard", "not_key"}


def test_config_filters_text() -> None:
    # Strings from TagVLiteralOrFilter#examples/#description (spec §7.3 quotes the example).
    literal = config_filters()["literal_or"]
    assert literal["examples"] == (
        'host=literal_or(web01),  host=literal_or(web01|web02|web03)  '
        '{"type":"literal_or","tagk":"host","filter":"web01|web02|web03","groupBy":false}')
    assert literal["description"] == (
        "Accepts one or more exact values and matches if the series contains any of them. "
        "Multiple values can be included and must be seperated by the | (pipe) character. "
        "The filter is case sensitive and will not allow characters that TSDB does not allow "
        "at write time.")
    assert config_filters()["not_iliteral_or"]["description"].startswith(
        "Accepts one or more exact values and matches if the series does NOT contain any")
    assert config_filters()["iwildcard"]["examples"] == (
        'host=iwildcard(web*),  host=iwildcard(web*.tsdb.net)  '
        '{"type":"iwildcard","tagk":"host","filter":"web*.tsdb.net","groupBy":false}')
    assert config_filters()["regexp"]["examples"] == (
        'host=regexp(.*)  {"type":"regexp","tagk":"host","filter":".*","groupBy":false}')


@pytest.mark.parametrize(("pattern", "expected"), [
    # TestTagVWildcardFilter: match* cases
    ("*.morpork.com", True), ("ogg*", True), ("ogg*com", True), ("ogg*ops*ank*com", True),
    ("ogg***com", True), ("****ogg*****mor****com****", True), ("****", True), ("*", True),
    ("*.morpork.org", False), ("magrat*", False), ("*quirm*", False),
    ("*.MorPork.com", False),
])
def test_wildcard(pattern: str, expected: bool) -> None:
    assert build_filter(Filter("wildcard", "host", pattern)).matches(OGG) is expected


@pytest.mark.parametrize(("pattern", "value", "expected"), [
    ("*.MorPork.com", OGG, True),  # TestTagVWildcardFilter#matchCaseInsensitive
    # OpenTSDB lowercases only the pattern; we lowercase the value too (query-differences.md)
    ("web*", "WEB01", True),
    ("WEB*", "web01", True),
    ("web*", "db01", False),
])
def test_iwildcard(pattern: str, value: str, expected: bool) -> None:
    assert build_filter(Filter("iwildcard", "host", pattern)).matches(value) is expected


@pytest.mark.parametrize(("ftype", "expr", "value", "expected"), [
    ("literal_or", "web01|web02", "web01", True),
    ("literal_or", "web01|web02", "WEB01", False),
    ("literal_or", "web01|web02", "web03", False),
    ("iliteral_or", "WEB01|web02", "web01", True),
    ("not_literal_or", "web01|web02", "web03", True),
    ("not_literal_or", "web01|web02", "web01", False),
    ("not_iliteral_or", "WEB01", "web01", False),
    ("not_iliteral_or", "WEB01", "web02", True),
    ("regexp", "web01", "xweb01y", True),  # unanchored, spec §2.6 table
    ("regexp", "^web0[12]$", "web03", False),
    ("regexp", "dbsvr.*", "web01", False),  # TestTsdbQuery#runRegexpNoMatch
])
def test_value_filters(ftype: str, expr: str, value: str, expected: bool) -> None:
    assert build_filter(Filter(ftype, "host", expr)).matches(value) is expected


def test_storage_hints() -> None:
    literal = build_filter(Filter("literal_or", "host", "web01|web02|"))
    assert literal.literals == frozenset({"web01", "web02"})  # Java split drops trailing ""
    assert not literal.negated and not literal.case_insensitive
    negated = build_filter(Filter("not_literal_or", "host", "web01"))
    assert negated.literals == frozenset({"web01"}) and negated.negated
    insensitive = build_filter(Filter("iliteral_or", "host", "WEB01"))
    assert insensitive.literals is None and insensitive.case_insensitive
    assert build_filter(Filter("wildcard", "host", "*")).match_any
    assert not build_filter(Filter("wildcard", "host", "web*")).match_any
    assert build_filter(Filter("regexp", "host", ".*")).literals is None


@pytest.mark.parametrize(("spec", "message"), [
    (Filter("wildcard", "host", "web01"), "Filter must contain an asterisk"),
    (Filter("literal_or", "host", "|"), "Filter must contain more than just a pipe"),
    (Filter("literal_or", "host", ""), "Filter cannot be null or empty"),
    (Filter("regexp", "host", ""), "Filter cannot be null or empty"),
    (Filter("not_key", "host", "x"), "The filter must be empty for the not_key filter"),
    (Filter("dummyfilter", "host", "x"), "Could not find a tag value filter of the type: "
                                         "dummyfilter"),
    (Filter("", "host", "x"), "The filter type cannot be null or empty"),
    (Filter("literal_or", "", "x"), "The tagk cannot be null or empty"),
])
def test_build_errors(spec: Filter, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        build_filter(spec)
    assert info.value.message == message


def test_bad_regexp_is_a_400() -> None:
    with pytest.raises(BadRequestError, match="Invalid regular expression"):
        build_filter(Filter("regexp", "host", "web(01"))


@pytest.mark.parametrize(("value", "expected"), [
    # TestTagVFilter#tagsToFiltersOldGroupBy and #tagsToFiltersNewFunctions
    ("quirm", Filter("literal_or", "host", "quirm", True)),
    ("vimes|vetinary", Filter("literal_or", "host", "vimes|vetinary", True)),
    ("*", Filter("wildcard", "host", "*", True)),
    ("*beybi", Filter("iwildcard", "host", "*beybi", True)),
    ("wildcard(*snapcase*)", Filter("wildcard", "host", "*snapcase*", True)),
    # #getFilterWildcardFatfinger, #getFilterPipeFatfinger, #getFilterRegexCase
    ("wil@*sugarbean", Filter("iwildcard", "host", "wil@*sugarbean", True)),
    ("lite@sugarbean|granny", Filter("literal_or", "host", "lite@sugarbean|granny", True)),
    ("REGEXP(web.*)", Filter("regexp", "host", "web.*", True)),
    ("not_key()", Filter("not_key", "host", "", True)),
])
def test_filter_from_tag(value: str, expected: Filter) -> None:
    assert filter_from_tag("host", value, group_by=True) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("regexp(web.*", "Filter must end with a ')': regexp(web.*"),
    ("dummyfilter(*quirm)", "Could not find a tag value filter of the type: dummyfilter"),
    ("", "Filter cannot be null or empty"),
    ("regexp()", "Filter cannot be null or empty"),
])
def test_filter_from_tag_errors(value: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        filter_from_tag("host", value, group_by=True)
    assert info.value.message == message


def test_group_by_duplicate_only_sets_group_by() -> None:
    # TagVFilter#mapToFilters: an equal group-by filter is not added twice.
    existing = (Filter("literal_or", "host", "web01|web02"),)
    merged = add_filters(existing, [Filter("literal_or", "host", "web02|web01", True)])
    assert merged == (Filter("literal_or", "host", "web01|web02", True),)
    # a non-group-by duplicate is appended, a different filter too
    assert len(add_filters(existing, [Filter("literal_or", "host", "web01|web02")])) == 2
    assert len(add_filters(existing, [Filter("literal_or", "host", "web01", True)])) == 2


@pytest.mark.parametrize(("filters", "explicit", "expected"), [
    # Spec §9 case 12 (a-i), which D7 series take part.
    (tags("host=web01"), False, [1, 4, 5, 6]),
    (tags("host=web01,dc=dal"), False, [1]),
    (tags("host=*,dc=dal"), False, [1, 2, 3]),
    (tags("dc=dal|lax"), False, [1, 2, 3, 6, 7]),
    (tags("host=web01"), True, [4]),
    (tags("host=*") + tags("dc=*", group_by=False), True, [1, 2, 3, 6, 7]),
    (tags("host=web0*"), False, [1, 2, 3, 4, 5, 6, 7]),
    (tags("host=WEB0*"), False, [1, 2, 3, 4, 5, 6, 7]),
    (tags("host=iliteral_or(WEB01)"), False, [1, 4, 5, 6]),
    (tags("host=not_literal_or(web01)", group_by=False), False, [2, 3, 7]),
    # not_literal_or needs the key present, like OpenTSDB's row-key regex (spec §2.6 item 1)
    (tags("dc=not_literal_or(lax)"), False, [1, 2, 3]),
    # not_key: series without the key
    (tags("owner=not_key()"), False, [1, 2, 3, 4, 6, 7]),
    (tags("dc=not_key()"), False, [4, 5]),
    (tags("host=web01,dc=not_key()"), True, [4]),
    # Case 13a: the docs' AND; OpenTSDB 2.4 ORs these (series 1,2,4,5,6,7), issue #973.
    ([Filter("literal_or", "host", "web01"), Filter("literal_or", "host", "web02")],
     False, []),
    # AND of two filters on one key that overlap
    ([Filter("literal_or", "host", "web01|web02"), Filter("wildcard", "host", "*2")],
     False, [2, 7]),
    ([], True, [1, 2, 3, 4, 5, 6, 7]),  # explicit tags without filters: no effect (§2.6.3)
])
def test_series_matches_d7(filters: list[Filter], explicit: bool, expected: list[int]) -> None:
    assert matching(filters, explicit) == expected


def test_merge_filters_intersects_literals_per_key() -> None:
    compiled = [build_filter(spec) for spec in [
        Filter("literal_or", "host", "a|b"), Filter("literal_or", "host", "b|c", True),
        Filter("regexp", "host", "^b"), Filter("wildcard", "dc", "*"),
        Filter("not_key", "owner", ""), Filter("iliteral_or", "env", "PROD"),
    ]]
    by_key = {c.tagk: c for c in merge_filters(compiled)}
    assert list(by_key) == ["host", "dc", "owner", "env"]
    assert by_key["host"].literals == frozenset({"b"})
    assert by_key["host"].group_by and not by_key["host"].excluded
    assert [f.type for f in by_key["host"].post_filters] == ["regexp"]
    assert by_key["dc"].literals is None and by_key["dc"].post_filters == ()
    assert by_key["owner"].excluded and by_key["owner"].post_filters == ()
    assert by_key["env"].literals is None and len(by_key["env"].post_filters) == 1


def test_group_by_keys() -> None:
    specs = tags("host=*,dc=dal") + tags("owner=jdoe", group_by=False) + tags("dc=*")
    assert group_by_keys(specs) == ["host", "dc"]
    assert group_by_keys([build_filter(s) for s in specs]) == ["host", "dc"]
