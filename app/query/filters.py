"""Tag value filters: the registry, old-style tag conversion, and per-series matching.

Filter expression grammar, as written in ``m=`` braces or JSON ``tags`` values::

    value = "*"                          ; group by every value: wildcard(*)
          | <type> "(" <expr> ")"        ; explicit filter, type name case-insensitive
          | <text containing "*">        ; implicit case-insensitive wildcard
          | <v1> ["|" <v2> ...]          ; literal_or

Semantics follow OpenTSDB 2.4 (``src/query/filter``), with two documented improvements (see
``docs/query-differences.md``): several filters on one tag key are always ANDed, as the docs
promise (OpenTSDB ORs or drops literal filters, issue #973), and case-insensitive wildcards
lowercase the tag value too (OpenTSDB only lowercases the pattern). ``not_key`` is
implemented and registered (OpenTSDB documents it but never registers it).

Everything here works on strings; storage maps names to UIDs itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import re2

from app.errors import BadRequestError
from app.query.ast import Filter


class TagFilter:
    """A compiled filter. ``matches`` sees the value of ``tagk`` in a series that has the key."""

    type = ""
    negated = False
    case_insensitive = False
    #: The exact values this filter names, for storage to resolve to UIDs (literal_or and
    #: not_literal_or only; None for everything else, including the case-insensitive kinds).
    literals: frozenset[str] | None = None
    #: True when every value matches, so storage need not look at values at all.
    match_any = False
    #: Whether the series must carry ``tagk`` (false only for not_key).
    requires_key = True

    def __init__(self, tagk: str, expr: str, group_by: bool) -> None:
        if not tagk:
            raise BadRequestError("Filter must have a tagk")
        self.tagk = tagk
        self.filter = expr
        self.group_by = group_by

    def matches(self, tagv: str) -> bool:
        raise NotImplementedError

    @property
    def identity(self) -> tuple[object, ...]:
        """What OpenTSDB's ``equals`` compares: used to merge duplicate group-by filters."""
        return (type(self).__name__, self.tagk, self.filter)

    def __repr__(self) -> str:
        return f"{self.type}({self.tagk}={self.filter}, group_by={self.group_by})"


def _split_pipes(expr: str) -> list[str]:
    # Java's String.split drops trailing empty strings but keeps leading and inner ones.
    parts = expr.split("|")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class LiteralOrFilter(TagFilter):
    type = "literal_or"

    def __init__(self, tagk: str, expr: str, group_by: bool) -> None:
        super().__init__(tagk, expr, group_by)
        if not expr:
            raise BadRequestError("Filter cannot be null or empty")
        if expr == "|":
            raise BadRequestError("Filter must contain more than just a pipe")
        values = _split_pipes(expr)
        if self.case_insensitive:
            values = [value.lower() for value in values]
        self.values = frozenset(values)
        if not self.case_insensitive:
            self.literals = self.values

    def matches(self, tagv: str) -> bool:
        found = (tagv.lower() if self.case_insensitive else tagv) in self.values
        return found != self.negated

    @property
    def identity(self) -> tuple[object, ...]:
        return ("literal", self.negated, self.tagk, self.values, self.case_insensitive)


class ILiteralOrFilter(LiteralOrFilter):
    type = "iliteral_or"
    case_insensitive = True


class NotLiteralOrFilter(LiteralOrFilter):
    type = "not_literal_or"
    negated = True


class NotILiteralOrFilter(LiteralOrFilter):
    type = "not_iliteral_or"
    negated = True
    case_insensitive = True


class WildcardFilter(TagFilter):
    """OpenTSDB's glob: a loose, ordered "contains" test on the ``*``-separated components."""

    type = "wildcard"

    def __init__(self, tagk: str, expr: str, group_by: bool) -> None:
        super().__init__(tagk, expr, group_by)
        if not expr:
            raise BadRequestError("Filter cannot be null or empty")
        actual = expr.lower() if self.case_insensitive else expr
        if "*" not in actual:
            raise BadRequestError("Filter must contain an asterisk")
        self.has_postfix = actual[0] == "*"
        actual = actual.lstrip("*") or "*"  # all of them but one, at once (not one by one)
        self.has_prefix = actual[-1] == "*"
        actual = actual.rstrip("*") or "*"
        self.components = actual.split("*") if actual.find("*") > 0 else [actual]
        self.match_any = self.components == ["*"]

    def matches(self, tagv: str) -> bool:
        if self.match_any:
            return True
        value = tagv.lower() if self.case_insensitive else tagv
        if self.has_postfix and not self.has_prefix and not value.endswith(self.components[-1]):
            return False
        if self.has_prefix and not self.has_postfix and not value.startswith(self.components[0]):
            return False
        idx = 0
        for component in self.components:
            # Java's indexOf("") always succeeds; idx deliberately does not jump past the match.
            if component and value.find(component, idx) < 0:
                return False
            idx += len(component)
        return True

    @property
    def identity(self) -> tuple[object, ...]:
        return ("wildcard", self.tagk, tuple(self.components), self.case_insensitive,
                self.has_prefix, self.has_postfix)


class IWildcardFilter(WildcardFilter):
    type = "iwildcard"
    case_insensitive = True


class RegexpFilter(TagFilter):
    """An unanchored search, like Java's ``Matcher.find`` in ``TagVRegexFilter``.

    Evaluated by RE2, whose time is linear in the tag value: a pattern such as ``(a+)+$``
    cannot pin a worker the way a backtracking engine (Java's, Python's ``re``) lets it.
    The price: backreferences and lookaround, which need backtracking, are refused with a 400.
    """

    type = "regexp"

    def __init__(self, tagk: str, expr: str, group_by: bool) -> None:
        super().__init__(tagk, expr, group_by)
        if not expr:
            raise BadRequestError("Filter cannot be null or empty")
        self.pattern = compile_regexp(expr)

    def matches(self, tagv: str) -> bool:
        return self.pattern.search(tagv) is not None


# Compiled-program memory RE2 may use per pattern: refuses absurd patterns, not real ones.
REGEXP_MAX_MEM_BYTES = 8 << 20
# An error message quotes at most this much of the pattern.
REGEXP_ECHO_CHARS = 200


def _regexp_options() -> re2.Options:
    options = re2.Options()
    options.max_mem = REGEXP_MAX_MEM_BYTES
    options.log_errors = False  # a bad pattern is the user's 400, not a server log line
    # A filter asks only whether a value matches: without capture groups RE2 keeps to its
    # fast matchers (5,000 nested groups made each search take half a second).
    options.never_capture = True
    return options


_REGEXP_OPTIONS = _regexp_options()


def compile_regexp(expr: str) -> re2._Regexp:
    """Compile a tag-value pattern for linear-time search, or a 400 saying why not."""
    try:
        return re2.compile(expr, options=_REGEXP_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        shown = expr if len(expr) <= REGEXP_ECHO_CHARS else expr[:REGEXP_ECHO_CHARS] + "..."
        raise BadRequestError(
            f"Invalid regular expression '{shown}': {str(reason)[:REGEXP_ECHO_CHARS]}",
            "pytsd evaluates regexp filters with RE2 (linear time): backreferences and "
            "lookaround are not supported") from None


class NotKeyFilter(TagFilter):
    """Matches series that do not carry ``tagk`` at all."""

    type = "not_key"
    requires_key = False

    def __init__(self, tagk: str, expr: str, group_by: bool) -> None:
        super().__init__(tagk, expr or "", group_by)
        if expr:
            raise BadRequestError("The filter must be empty for the not_key filter")

    def matches(self, tagv: str) -> bool:
        return False  # a value exists, so the series has the key


@dataclass(frozen=True)
class FilterType:
    """One entry of ``/api/config/filters``."""

    name: str
    description: str
    examples: str
    factory: Callable[[str, str, bool], TagFilter]


def _examples(name: str, values: str, json_filter: str) -> str:
    return (f"host={name}({values.split('  ')[0]}),  host={name}({values.split('  ')[1]})  "
            f'{{"type":"{name}","tagk":"host","filter":"{json_filter}","groupBy":false}}')


_LITERAL_TEXT = ("Accepts one or more exact values and matches if the series {does} any of "
                 "them. Multiple values can be included and must be seperated by the | (pipe) "
                 "character. The filter is case {case} and will not allow characters that TSDB "
                 "does not allow at write time.")
_WILDCARD_TEXT = ("Performs pre, post and in-fix glob matching of values. The globs are case "
                  "{case} and multiple wildcards can be used. The wildcard character is the * "
                  "(asterisk). {extra}At least one wildcard must be present in the filter value. "
                  "A wildcard by itself can be used as well to match on any value for the tag "
                  "key.")
_WEB = "web01  web01|web02|web03"
_GLOB = "web*  web*.tsdb.net"


def _literal_type(name: str, cls: type[TagFilter], does: str, case: str) -> FilterType:
    return FilterType(name, _LITERAL_TEXT.format(does=does, case=case),
                      _examples(name, _WEB, "web01|web02|web03"), cls)


#: The registry: filter name → type. Text is what OpenTSDB's ``/api/config/filters`` prints.
FILTERS: dict[str, FilterType] = {
    "literal_or": _literal_type("literal_or", LiteralOrFilter, "contains", "sensitive"),
    "iliteral_or": _literal_type("iliteral_or", ILiteralOrFilter, "contains", "insensitive"),
    "not_literal_or": _literal_type("not_literal_or", NotLiteralOrFilter, "does NOT contain",
                                    "sensitive"),
    "not_iliteral_or": _literal_type("not_iliteral_or", NotILiteralOrFilter,
                                     "does NOT contain", "insensitive"),
    "wildcard": FilterType(
        "wildcard", _WILDCARD_TEXT.format(case="sensitive", extra=""),
        _examples("wildcard", _GLOB, "web*.tsdb.net"), WildcardFilter),
    "iwildcard": FilterType(
        "iwildcard", _WILDCARD_TEXT.format(
            case="insensitive", extra="Case insensitivity is achieved by dropping all values "
                                      "to lower case. "),
        _examples("iwildcard", _GLOB, "web*.tsdb.net"), IWildcardFilter),
    "regexp": FilterType(
        "regexp",
        "Provides full, POSIX compliant regular expression using the built in Java Pattern "
        "class. Note that an expression containing curly braces {} will not parse properly in "
        "URLs. If the pattern is not a valid regular expression then an exception will be "
        "raised.",
        'host=regexp(.*)  {"type":"regexp","tagk":"host","filter":".*","groupBy":false}',
        RegexpFilter),
    "not_key": FilterType(
        "not_key",
        "Skips any time series with the given tag key, regardless of the value. This can be "
        "useful for situations where a metric has inconsistent tag sets. NOTE: The filter "
        "value must be null or an empty string.",
        'host=not_key()  {"type":"not_key","tagk":"host","filter":"","groupBy":false}',
        NotKeyFilter),
}


def config_filters() -> dict[str, dict[str, str]]:
    """The body of ``/api/config/filters``."""
    return {name: {"examples": ft.examples, "description": ft.description}
            for name, ft in FILTERS.items()}


def build_filter(spec: Filter) -> TagFilter:
    """Compile one model filter; raises :class:`BadRequestError` with OpenTSDB's messages."""
    if not spec.type:
        raise BadRequestError("The filter type cannot be null or empty")
    if not spec.tagk:
        raise BadRequestError("The tagk cannot be null or empty")
    filter_type = FILTERS.get(spec.type)
    if filter_type is None:
        raise BadRequestError(f"Could not find a tag value filter of the type: {spec.type}")
    return filter_type.factory(spec.tagk, spec.filter, spec.group_by)


def compile_filters(specs: Iterable[Filter]) -> tuple[TagFilter, ...]:
    """Compile a sub-query's filters once, for :func:`series_matches` and storage."""
    return tuple(build_filter(spec) for spec in specs)


def filter_from_tag(tagk: str, value: str, group_by: bool) -> Filter:
    """Convert an old-style ``tagk=value`` pair (``m=`` braces, JSON ``tags``) to a filter."""
    if not tagk:
        raise BadRequestError("Tagk cannot be null or empty")
    if not value:
        raise BadRequestError("Filter cannot be null or empty")
    if value == "*":
        spec = Filter("wildcard", tagk, "*", group_by)
    elif "(" in value:
        paren = value.index("(")
        if not value.endswith(")"):
            raise BadRequestError(f"Filter must end with a ')': {value}")
        spec = Filter(value[:paren].lower(), tagk, value[paren + 1:-1], group_by)
    elif "*" in value:
        # OpenTSDB makes an implicit case-insensitive wildcard here; iwildcard is exactly that.
        spec = Filter("iwildcard", tagk, value, group_by)
    else:
        spec = Filter("literal_or", tagk, value, group_by)
    build_filter(spec)
    return spec


def add_filters(existing: Sequence[Filter], new: Iterable[Filter]) -> tuple[Filter, ...]:
    """Append filters; a group-by filter equal to one already there only sets its groupBy."""
    result = list(existing)
    identities = [build_filter(spec).identity for spec in result]
    for spec in new:
        identity = build_filter(spec).identity
        if spec.group_by and identity in identities:
            position = identities.index(identity)
            result[position] = replace(result[position], group_by=True)
            continue
        result.append(spec)
        identities.append(identity)
    return tuple(result)


def series_matches(tags: Mapping[str, str], filters: Sequence[TagFilter],
                   explicit_tags: bool = False) -> bool:
    """Whether a series with this tag map passes a sub-query's filters.

    Every filter must hold (filters on the same key are ANDed). A filter other than not_key
    also needs its key present, as OpenTSDB's row-key regex does, so ``not_literal_or``
    excludes series without the key. With ``explicit_tags`` and at least one filter, the
    series must carry exactly the filtered keys (those not excluded by not_key).
    """
    for tag_filter in filters:
        tagv = tags.get(tag_filter.tagk)
        if tagv is None:
            if tag_filter.requires_key:
                return False
        elif not tag_filter.requires_key or not tag_filter.matches(tagv):
            return False
    if explicit_tags and filters:
        wanted = {f.tagk for f in filters if f.requires_key}
        return set(tags) == wanted
    return True


@dataclass(frozen=True)
class KeyConstraint:
    """Everything the filters of one sub-query demand of one tag key, for storage.

    ``literals``: the allowed exact values (intersection of every literal_or on the key;
    None means any value). ``post_filters``: filters still to run on the value after that
    (not literal_or, not match-all). ``excluded``: a not_key filter names the key, so the
    series must not have it. ``group_by``: some filter on the key groups.
    """

    tagk: str
    group_by: bool
    excluded: bool
    literals: frozenset[str] | None
    post_filters: tuple[TagFilter, ...]


def merge_filters(filters: Sequence[TagFilter]) -> list[KeyConstraint]:
    """Merge a sub-query's filters per tag key (first-appearance order), ANDing them."""
    constraints: list[KeyConstraint] = []
    for tagk in dict.fromkeys(f.tagk for f in filters):
        on_key = [f for f in filters if f.tagk == tagk]
        literals: frozenset[str] | None = None
        post: list[TagFilter] = []
        for tag_filter in on_key:
            if isinstance(tag_filter, NotKeyFilter) or tag_filter.match_any:
                continue
            if tag_filter.literals is not None and not tag_filter.negated:
                allowed = tag_filter.literals
                literals = allowed if literals is None else literals & allowed
            else:
                post.append(tag_filter)
        constraints.append(KeyConstraint(
            tagk=tagk,
            group_by=any(f.group_by for f in on_key),
            excluded=any(isinstance(f, NotKeyFilter) for f in on_key),
            literals=literals,
            post_filters=tuple(post)))
    return constraints


def group_by_keys(filters: Iterable[TagFilter | Filter]) -> list[str]:
    """Tag keys that split the output: any filter on the key has groupBy (first-seen order)."""
    return list(dict.fromkeys(f.tagk for f in filters if f.group_by))
