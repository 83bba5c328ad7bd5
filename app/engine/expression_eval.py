"""JEXL 2's arithmetic over numpy arrays: one expression tree, every step of every series at once.

Each value carries its Java type per element: variables are ``Double``; integer literals
``Integer``; decimal literals ``Float`` (whose value JEXL reads back through its decimal text,
so ``0.1`` counts as 0.1); comparisons and logic ``Boolean``. The rules
follow JEXL's lenient ``JexlArithmetic`` as OpenTSDB 2.4 runs it:

- ``+ - * / %`` compute in double when either side is a Float or Double, else in integers
  (booleans count as 0/1); division or modulo by zero answers ``Double`` 0.0, not an error;
- ``< <= > >=`` compare as doubles where NaN is below every number and equal to NaN;
- ``==`` of two Doubles is ``Double.equals`` (NaN equals NaN, 0.0 differs from -0.0), of mixed
  types a numeric ``==``;
- truth of a number is ``!NaN && != 0``; ``-`` of a Boolean is its negation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.engine.model import Float64Array
from app.query.expression.jexl import Node

DOUBLE, INT, FLOAT, BOOL = 0, 1, 2, 3
JAVA_TYPE = {DOUBLE: "java.lang.Double", INT: "java.lang.Integer", FLOAT: "java.lang.Float",
             BOOL: "java.lang.Boolean"}
_LITERAL_KIND = {"int": INT, "float": FLOAT, "bool": BOOL}
KindArray = np.ndarray


@dataclass
class Value:
    values: Float64Array
    kinds: KindArray  # int8 per element


def _full(shape: tuple[int, ...], value: float, kind: int) -> Value:
    return Value(np.full(shape, value, dtype=np.float64), np.full(shape, kind, dtype=np.int8))


def truth(v: Value) -> np.ndarray:
    return ~np.isnan(v.values) & (v.values != 0)


def evaluate(tree: Node, env: dict[str, Float64Array], shape: tuple[int, ...]) -> Value:
    """``tree`` over the variables in ``env`` (arrays of ``shape``, Doubles)."""
    op = tree.op
    if op == "num":
        return _full(shape, tree.value, _LITERAL_KIND[tree.kind])
    if op == "var":
        return Value(env[tree.name].astype(np.float64, copy=False),
                     np.full(shape, DOUBLE, dtype=np.int8))
    args = [evaluate(arg, env, shape) for arg in tree.args]
    if op == "neg":
        (x,) = args
        is_bool = x.kinds == BOOL
        return Value(np.where(is_bool, (~truth(x)).astype(np.float64), -x.values), x.kinds)
    if op == "!":
        return Value((~truth(args[0])).astype(np.float64), _bool_kinds(shape))
    if op in ("&&", "||"):
        left, right = truth(args[0]), truth(args[1])
        result = (left & right) if op == "&&" else (left | right)
        return Value(result.astype(np.float64), _bool_kinds(shape))
    if op == "?":
        cond = truth(args[0])
        return Value(np.where(cond, args[1].values, args[2].values),
                     np.where(cond, args[1].kinds, args[2].kinds).astype(np.int8))
    if op == "?:":
        cond = truth(args[0])
        return Value(np.where(cond, args[0].values, args[1].values),
                     np.where(cond, args[0].kinds, args[1].kinds).astype(np.int8))
    if op in ("==", "!="):
        equal = _equals(args[0], args[1])
        return Value((equal if op == "==" else ~equal).astype(np.float64), _bool_kinds(shape))
    if op in ("<", "<=", ">", ">="):
        return Value(_compare(op, args[0].values, args[1].values).astype(np.float64),
                     _bool_kinds(shape))
    return _arithmetic(op, args[0], args[1])


def _bool_kinds(shape: tuple[int, ...]) -> KindArray:
    return np.full(shape, BOOL, dtype=np.int8)


def _compare(op: str, left: Float64Array, right: Float64Array) -> np.ndarray:
    """JEXL's ``compare``: NaN sorts below every number and equals NaN."""
    l_nan, r_nan = np.isnan(left), np.isnan(right)
    less = (l_nan & ~r_nan) | (left < right)
    greater = (~l_nan & r_nan) | (left > right)
    if op == "<":
        return less
    if op == ">":
        return greater
    return ~greater if op == "<=" else ~less


def _equals(left: Value, right: Value) -> np.ndarray:
    both_double = (left.kinds == DOUBLE) & (right.kinds == DOUBLE)
    same_bits = (left.values.view(np.int64) == right.values.view(np.int64)) | (
        np.isnan(left.values) & np.isnan(right.values))
    return np.where(both_double, same_bits, left.values == right.values)


def _arithmetic(op: str, left: Value, right: Value) -> Value:
    floating = np.isin(left.kinds, (DOUBLE, FLOAT)) | np.isin(right.kinds, (DOUBLE, FLOAT))
    l_val, r_val = left.values, right.values
    with np.errstate(all="ignore"):
        if op == "+":
            result = l_val + r_val
        elif op == "-":
            result = l_val - r_val
        elif op == "*":
            result = l_val * r_val
        elif op == "/":
            quotient = l_val / r_val
            result = np.where(floating, quotient, np.trunc(quotient))
        else:  # Java's % keeps the dividend's sign, like fmod
            result = np.fmod(l_val, r_val)
    kinds = np.where(floating, DOUBLE, INT).astype(np.int8)
    if op in ("/", "%"):
        by_zero = r_val == 0  # lenient JEXL: an ArithmeticException answers Double 0.0
        result = np.where(by_zero, 0.0, result)
        kinds = np.where(by_zero, DOUBLE, kinds).astype(np.int8)
    return Value(result, kinds)
