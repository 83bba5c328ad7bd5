"""``/api/query/gexp``'s ``exp=`` strings: Graphite-style calls whose leaves are ``m=`` queries.

The grammar is OpenTSDB 2.4's (``src/parser.jj``, a JavaCC parser); whitespace between tokens
is skipped::

    expression = NAME "(" parameter ("," parameter)* ")"
    parameter  = expression | metric | NAME
    metric     = NAME ":" [NAME ":"] [NAME ":"] NAME ["{" NAME "=" NAME ("," NAME "=" NAME)* "}"]
    NAME       = one or more of  a-z A-Z 0-9 * - _ # / $ @ | . ' [ ]

Text after the first complete expression is ignored, as OpenTSDB's parser stops there. A
``metric`` leaf is rebuilt without whitespace (``sum:1m-avg:m{host=*}``) and parsed later as an
``m=`` sub-query; a ``NAME`` parameter is a function parameter (``2``, ``'5min'``, an alias).
Every leaf of every expression of a request gets its own index into one list of sub-queries.
Errors use OpenTSDB's messages: ``Failed to parse <exp>`` and
``Function <name> has not been implemented`` (the registry of names is passed in).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from app.errors import BadRequestError

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789*-_#/$@|.'[]")
_PUNCTUATION = frozenset("(),:{}=")
_SPACE = frozenset(" \t\n\r")
MAX_DEPTH = 64  # nested calls; OpenTSDB's recursive parser has no limit but its stack


@dataclass(frozen=True)
class MetricLeaf:
    """An ``m=``-style sub-query; ``index`` is its place in the request's leaf list."""

    text: str
    index: int


@dataclass(frozen=True)
class Call:
    """``name(args...)``: each argument a nested :class:`Call`, a :class:`MetricLeaf` or a
    plain parameter string."""

    name: str
    args: tuple[Call | MetricLeaf | str, ...]

    @property
    def series_args(self) -> list[tuple[int, Call | MetricLeaf]]:
        return [(i, a) for i, a in enumerate(self.args) if not isinstance(a, str)]

    @property
    def params(self) -> list[str]:
        return [a for a in self.args if isinstance(a, str)]


class _Syntax(Exception):
    """Raised inside the parser; becomes OpenTSDB's ``Failed to parse`` message."""


def _tokens(text: str) -> list[str]:
    """Split into NAME and punctuation tokens; any other character is a lexical error."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in _SPACE:
            i += 1
        elif char in _PUNCTUATION:
            out.append(char)
            i += 1
        elif char in NAME_CHARS:
            j = i
            while j < len(text) and text[j] in NAME_CHARS:
                j += 1
            out.append(text[i:j])
            i = j
        elif text.startswith("&&", i):  # a token of OpenTSDB's grammar that no rule uses
            out.append("&&")
            i += 2
        else:
            out.append("\0")  # OpenTSDB's lexer fails here; nothing can parse past it
            break
    return out


def _is_name(token: str | None) -> bool:
    return token is not None and token[0] in NAME_CHARS


class _Parser:
    def __init__(self, tokens: list[str], functions: Collection[str], leaves: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.functions = functions
        self.leaves = leaves
        self.depth = 0

    def peek(self, ahead: int = 0) -> str | None:
        at = self.pos + ahead
        return self.tokens[at] if at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is None and not _is_name(token)) or (
                expected is not None and token != expected):
            raise _Syntax
        self.pos += 1
        return token

    def expression(self) -> Call:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Syntax(f"calls nested deeper than {MAX_DEPTH}")
        name = self.take()
        if name not in self.functions:
            # OpenTSDB looks the function up as soon as it has read the name
            raise BadRequestError(f"Function {name} has not been implemented")
        self.take("(")
        args = [self.parameter()]
        while self.peek() == ",":
            self.pos += 1
            args.append(self.parameter())
        self.take(")")
        self.depth -= 1
        return Call(name, tuple(args))

    def parameter(self) -> Call | MetricLeaf | str:
        if _is_name(self.peek()) and self.peek(1) == "(":
            return self.expression()
        if _is_name(self.peek()) and self.peek(1) == ":":
            text = self.metric()
            self.leaves.append(text)
            return MetricLeaf(text, len(self.leaves) - 1)
        return self.take()

    def metric(self) -> str:
        parts = [self.take()]
        self.take(":")
        for _ in range(2):  # the optional interval and rate parts
            if _is_name(self.peek()) and self.peek(1) == ":":
                parts.append(self.take())
                self.pos += 1
        parts.append(self.take())
        text = ":".join(parts)
        if self.peek() != "{":
            return text
        self.pos += 1
        pairs = [self.tag_pair()]
        while self.peek() == ",":
            self.pos += 1
            pairs.append(self.tag_pair())
        self.take("}")
        return text + "{" + ",".join(pairs) + "}"

    def tag_pair(self) -> str:
        key = self.take()
        self.take("=")
        return f"{key}={self.take()}"


def parse_expression(text: str, functions: Collection[str], leaves: list[str]) -> Call:
    """One ``exp=`` value → its call tree; its metric leaves are appended to ``leaves``."""
    parser = _Parser(_tokens(text), functions, leaves)
    try:
        return parser.expression()
    except _Syntax as exc:
        raise BadRequestError(f"Failed to parse {text}", str(exc) or None) from None


def parse_expressions(texts: list[str], functions: Collection[str]) -> tuple[list[Call],
                                                                              list[str]]:
    """Every ``exp=`` of a request → (trees, the metric leaves of all of them in order)."""
    leaves: list[str] = []
    trees = [parse_expression(text, functions, leaves) for text in texts]
    return trees, leaves
