"""The arithmetic subset of JEXL 2 that OpenTSDB 2.4 evaluates expressions with, parsed safely.

OpenTSDB hands each expression to Apache JEXL; pytsd never ``eval``\\ s text. This module parses
the part of JEXL an expression over time series can use into a small tree:

- variables (metric or expression ids), integer literals (``Integer``), decimal literals
  (``Float``), ``true`` and ``false``;
- unary ``-``, ``!``/``not``; ``*``, ``/``/``div``, ``%``/``mod``; ``+``, ``-``;
  ``<``/``lt``, ``<=``/``le``, ``>``/``gt``, ``>=``/``ge``; ``==``/``eq``, ``!=``/``ne``;
  ``&&``/``and``; ``||``/``or``; the ternary ``c ? x : y`` and ``c ?: y``; parentheses.

Anything else (bitwise operators, assignments, method calls, strings, several statements) is a
parse error. The evaluation rules (JEXL's types and its lenient arithmetic) are in
``app.engine.expression_eval``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class ExpressionSyntaxError(ValueError):
    """The expression is not in the supported JEXL subset; ``column`` is 1-based."""

    def __init__(self, expr: str, column: int, reason: str) -> None:
        super().__init__(f"parsing error in '{expr}' at column {column}: {reason}")
        self.column = column


@dataclass(frozen=True)
class Node:
    """``op`` is ``num`` (value, kind), ``var`` (name) or an operator over ``args``."""

    op: str
    args: tuple[Node, ...] = ()
    value: float = 0.0
    kind: str = ""   # for ``num``: int | float | bool
    name: str = ""   # for ``var``


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<float>\d+\.\d+(?:[eE][+-]?\d+)?)
  | (?P<int>\d+)
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op>\?:|&&|\|\||==|!=|<=|>=|[-+*/%<>!?:()])
""", re.VERBOSE)
_WORDS = {"and": "&&", "or": "||", "not": "!", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "div": "/", "mod": "%"}
_RESERVED = {"size", "empty", "new", "null", "function", "var", "return", "if", "else", "for",
             "while"}
# Deepest tree, and most nested parentheses/unary/ternary operators, accepted: far beyond any
# real expression, well inside Python's recursion limit for the parser and the evaluator.
MAX_DEPTH = 200
MAX_NESTING = 64
# Binary operators by precedence level, lowest first (JEXL 2's grammar).
_LEVELS: tuple[tuple[str, ...], ...] = (("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="),
                                        ("+", "-"), ("*", "/", "%"))


@dataclass(frozen=True)
class _Token:
    kind: str   # float | int | name | op | end
    text: str
    column: int


def _tokens(expr: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ExpressionSyntaxError(expr, pos + 1, f"unexpected character {expr[pos]!r}")
        kind = match.lastgroup or ""
        text = match.group()
        if kind == "name" and text in _WORDS:
            kind, text = "op", _WORDS[text]
        if kind != "space":
            out.append(_Token(kind, text, pos + 1))
        pos = match.end()
    out.append(_Token("end", "", len(expr) + 1))
    return out


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = _tokens(expr)
        self.pos = 0
        self.depth = 0

    def nested(self, rule: Callable[[], Node]) -> Node:
        """``rule()`` one level deeper: bounds the recursion (parentheses, unary and ternary
        chains) on hostile input."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(self.peek(), "nested too deeply")
        try:
            return rule()
        finally:
            self.depth -= 1

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def fail(self, token: _Token, reason: str) -> ExpressionSyntaxError:
        return ExpressionSyntaxError(self.expr, token.column, reason)

    def expect(self, text: str) -> None:
        token = self.take()
        if token.kind != "op" or token.text != text:
            raise self.fail(token, f"expected {text!r}, found {token.text or 'the end'!r}")

    def ternary(self) -> Node:
        return self.nested(self._ternary)

    def _ternary(self) -> Node:
        cond = self.binary(0)
        token = self.peek()
        if token.kind == "op" and token.text == "?:":
            self.take()
            return Node("?:", (cond, self.ternary()))
        if token.kind == "op" and token.text == "?":
            self.take()
            then = self.ternary()
            self.expect(":")
            return Node("?", (cond, then, self.ternary()))
        return cond

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek().kind == "op" and self.peek().text in _LEVELS[level]:
            op = self.take().text
            left = Node(op, (left, self.binary(level + 1)))
        return left

    def unary(self) -> Node:
        return self.nested(self._unary)

    def _unary(self) -> Node:
        token = self.peek()
        if token.kind == "op" and token.text in ("-", "!"):
            self.take()
            operand = self.unary()
            if token.text == "-" and operand.op == "num" and operand.kind != "bool":
                return Node("num", value=-operand.value, kind=operand.kind)
            return Node("neg" if token.text == "-" else "!", (operand,))
        return self.primary()

    def primary(self) -> Node:
        token = self.take()
        if token.kind == "int":
            return Node("num", value=float(int(token.text)), kind="int")
        if token.kind == "float":
            # A java.lang.Float, which JEXL widens through its shortest decimal text
            return Node("num", value=float(str(np.float32(token.text))), kind="float")
        if token.kind == "name":
            if token.text in ("true", "false"):
                return Node("num", value=float(token.text == "true"), kind="bool")
            if token.text in _RESERVED:
                raise self.fail(token, f"{token.text!r} is not supported")
            return Node("var", name=token.text)
        if token.kind == "op" and token.text == "(":
            inner = self.ternary()
            self.expect(")")
            return inner
        raise self.fail(token, f"unexpected {token.text or 'end of expression'!r}")


def parse(expr: str) -> Node:
    """The tree of ``expr``; :class:`ExpressionSyntaxError` when it is not in the subset."""
    parser = _Parser(expr)
    tree = parser.ternary()
    token = parser.peek()
    if token.kind != "end":
        raise parser.fail(token, f"unexpected {token.text!r}")
    if _depth(tree) > MAX_DEPTH:  # long operator chains nest the tree without recursing here
        raise ExpressionSyntaxError(expr, 1, "nested too deeply")
    return tree


def _depth(tree: Node) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((arg, depth + 1) for arg in node.args)
    return deepest


def variables(tree: Node) -> list[str]:
    """The variable names of ``tree``, first use first, each once."""
    found: dict[str, None] = {}

    def walk(node: Node) -> None:
        if node.op == "var":
            found.setdefault(node.name)
        for arg in node.args:
            walk(arg)

    walk(tree)
    return list(found)
