"""HAVING, ORDER BY and LIMIT over a SELECT's answer (:class:`~dpcurator.sql.result.SqlResult`).

HAVING, ORDER BY and LIMIT read only the released answers (each group's noisy values),
never the data: post-processing, free (Dwork & Roth 2014, Prop. 2.1). A HAVING
condition is compiled once (:func:`compile_having`) into a small tree over the outputs
and evaluated with SQL's three-valued logic: a null (a small group's mean, which has no
value) makes a comparison unknown, and an unknown row is left out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpcurator.errors import QueryError
from dpcurator.queries.values import parse_number
from dpcurator.sql.select import output_index
from dpcurator.sql.where import in_list

__all__ = ["compile_having", "shape"]

Row = list[Any]
#: A compiled condition: row values in, True, False or None (unknown) out.
Condition = Callable[[Sequence[Any]], bool | None]
_OPS: dict[type, Callable[[Any, Any], bool]] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
}


def compile_having(
    node: exp.Expression, positions: Mapping[str, int], texts: Sequence[str]
) -> Condition:
    """A HAVING condition over the SELECT's outputs (by alias, position or expression
    as written there), compiled: comparisons with values, BETWEEN, IN, IS [NOT] NULL,
    AND, OR, NOT."""
    if isinstance(node, exp.Paren):
        return compile_having(node.this, positions, texts)
    if isinstance(node, exp.And | exp.Or):
        a = compile_having(node.this, positions, texts)
        b = compile_having(node.expression, positions, texts)
        if isinstance(node, exp.And):
            return lambda r: _and(a(r), b(r))
        return lambda r: _or(a(r), b(r))
    if isinstance(node, exp.Not):
        inner = compile_having(node.this, positions, texts)
        return lambda r: None if (v := inner(r)) is None else not v
    for cls, op in _OPS.items():
        if type(node) is cls:
            left, right = (
                _operand(node.this, positions, texts),
                _operand(node.expression, positions, texts),
            )
            return lambda r: _compare(op, left(r), right(r))
    if isinstance(node, exp.Between):
        x = _operand(node.this, positions, texts)
        lo = _operand(node.args["low"], positions, texts)
        hi = _operand(node.args["high"], positions, texts)
        return lambda r: _and(
            _compare(_OPS[exp.GTE], x(r), lo(r)), _compare(_OPS[exp.LTE], x(r), hi(r))
        )
    if isinstance(node, exp.In):
        x = _operand(node.this, positions, texts)
        vals = [_operand(v, positions, texts) for v in in_list(node)]
        return lambda r: _any([_compare(_OPS[exp.EQ], x(r), v(r)) for v in vals])
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        x = _operand(node.this, positions, texts)
        return lambda r: x(r) is None
    raise QueryError(
        f"SQL: HAVING {node.sql(dialect='bigquery')}: compare outputs with values (=, <, "
        "BETWEEN, IN, IS NULL), joined by AND, OR, NOT"
    )


def _operand(
    node: exp.Expression, positions: Mapping[str, int], texts: Sequence[str]
) -> Callable[[Sequence[Any]], Any]:
    if isinstance(node, exp.Paren):
        return _operand(node.this, positions, texts)
    if isinstance(node, exp.Literal):
        if node.is_string:
            text = node.this
            return lambda r: text
        x = parse_number(node.this)
        return lambda r: x
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        neg = parse_number("-" + node.this.this)
        return lambda r: neg
    if isinstance(node, exp.Boolean):
        b = bool(node.this)
        return lambda r: b
    if isinstance(node, exp.Null):
        return lambda r: None
    i = output_index(node, positions, texts, "HAVING")
    return lambda r: r[i]


def _number(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, float):
        return Fraction(v)
    if isinstance(v, int):
        return Fraction(v)
    return v


def _compare(op: Callable[[Any, Any], bool], a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    a, b = _number(a), _number(b)
    try:
        return bool(op(a, b))
    except TypeError:
        raise QueryError(f"SQL: HAVING compares {a!r} with {b!r}, of different kinds") from None


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _any(vals: Sequence[bool | None]) -> bool | None:
    if any(v is True for v in vals):
        return True
    return None if any(v is None for v in vals) else False


def _key(value: Any) -> tuple[int, Any]:
    """A sort key putting numbers, texts and booleans each in their own order."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float | Fraction):
        return (1, Fraction(value) if not isinstance(value, Fraction) else value)
    return (2, str(value))


def _at(c: int, row: Row) -> tuple[int, Any]:
    return _key(row[c])


def shape(
    rows: Sequence[Row],
    having: Condition | None,
    order: Sequence[tuple[int, bool, bool]],
    limit: int | None,
    column_of: Sequence[int],
) -> list[Row]:
    """HAVING, ORDER BY and LIMIT over rows of output values (``column_of[i]``: where
    output ``i`` is in a row). Sorting is stable: groups keep the domain's order among
    ties."""
    picked = [r for r in rows if having is None or having([r[c] for c in column_of]) is True]
    for i, desc, nulls_first in reversed(order):
        c = column_of[i]
        present = [r for r in picked if r[c] is not None]
        absent = [r for r in picked if r[c] is None]
        present.sort(key=functools.partial(_at, c), reverse=desc)
        picked = absent + present if nulls_first else present + absent
    return picked if limit is None else picked[:limit]
