"""SQL names and the WHERE clause, read from sqlglot's tree into dpcurator's query
language (:mod:`dpcurator.queries.parser`), so that one predicate means one set of
points everywhere: :class:`Names` resolves column references against the (joined)
schema, :func:`where_text` re-writes a condition.

Part of :func:`dpcurator.sql.select.parse_select`; nothing here reads data.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TypeVar

from sqlglot import exp

from dpcurator.errors import QueryError
from dpcurator.queries.joins import JoinedSchema
from dpcurator.queries.parser import parse_query
from dpcurator.queries.parts import PARTS
from dpcurator.queries.predicates import render_name
from dpcurator.queries.schema import Schema
from dpcurator.queries.values import parse_number
from dpcurator.sql.text import PREFIX

_PART_CLASSES: dict[type, str] = {
    exp.Year: "year",
    exp.Month: "month",
    exp.Day: "day",
    exp.Hour: "hour",
}
_COMPARE = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
T = TypeVar("T")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class Names:
    """Resolves SQL column references to the (joined) schema's attribute names."""

    def __init__(self, schema: Schema, tables: Mapping[str, str], join: JoinedSchema | None):
        self.schema = schema
        self.tables = tables  # alias or name -> table
        self.join = join
        #: each comparison read, as (its query-language text, its SQL as written): the
        #: query language reports positions in the text re-written from SQL, which the
        #: user never saw; :func:`locate` names the comparison instead
        #: each comparison's query-language text and its node, shown only in a refusal
        self.leaves: list[tuple[str, exp.Expression]] = []

    def column(self, node: exp.Column) -> str:
        name = node.name
        qualifier = node.table or None
        table = None
        if qualifier is not None:
            table = self.tables.get(qualifier)
            if table is None:
                raise QueryError(f"SQL: {qualifier}.{name}: no table {qualifier!r} in FROM")
        got = self._resolve(table, name)
        if got is None:  # the same name in another Unicode normal form (NFD: e + U+0300)
            written = [a for a in self._written() if _nfc(a) == _nfc(name)]
            if len(set(written)) == 1:
                got = self._resolve(table, written[0])
        if got is not None:
            return got
        odd = f" (written {name!a}: not in Unicode NFC)" if _nfc(name) != name else ""
        raise QueryError(f"SQL: unknown column {shown(node)}{odd}")

    def _resolve(self, table: str | None, name: str) -> str | None:
        if self.join is not None:
            return self.join.resolve(table, name)
        if name in self.schema:
            return name
        folded = self.schema.named_like(name)
        return folded[0] if len(folded) == 1 else None

    def _written(self) -> list[str]:
        """The columns' names as the tables write them (a joined one unqualified)."""
        if self.join is not None:
            return [a for _, a in self.join.sources]
        return list(self.schema.names)

    def term(self, node: exp.Expression) -> str:
        """A column, or a part of a time column, as the query language writes it."""
        if isinstance(node, exp.Column):
            return render_name(self.column(node))
        part = part_name(node)
        if part is not None:
            inner = node.this if not isinstance(node, exp.Extract) else node.expression
            if isinstance(node, exp.Anonymous):
                if len(node.expressions) != 1:
                    raise QueryError(f"SQL: {node.sql()} takes one column")
                inner = node.expressions[0]
            if not isinstance(inner, exp.Column):
                raise QueryError(f"SQL: {part}(...) takes a column, got {inner.sql()}")
            return f"{part}({render_name(self.column(inner))})"
        dashed = dashed_name(node)
        if dashed is not None:
            raise QueryError(
                f"SQL: {dashed} reads as a subtraction; write `{dashed}` in backticks for "
                "the column of that name"
            )
        raise QueryError(f"SQL: {shown(node)} is not a column or a part of a time")


def _nfc(name: str) -> str:
    """A name compared as Unicode's composed form: ``espe\u0300ce`` (as macOS file
    names and some editors write it) and ``esp\u00e8ce`` look alike and are one name."""
    return unicodedata.normalize("NFC", name)


def shown(node: exp.Expression) -> str:
    text = node.sql(dialect="bigquery").replace(PREFIX, "")
    return text if len(text) <= 60 else text[:57] + "..."


def dashed_name(node: exp.Expression) -> str | None:
    """``hours-per-week`` read as columns subtracted: its dashed name, else None."""
    parts: list[str] = []

    def walk(n: exp.Expression) -> bool:
        if isinstance(n, exp.Sub):
            return walk(n.this) and walk(n.expression)
        if isinstance(n, exp.Column) and not n.table:
            parts.append(n.name)
            return True
        return False

    return "-".join(parts) if isinstance(node, exp.Sub) and walk(node) else None


def part_name(node: exp.Expression) -> str | None:
    for cls, name in _PART_CLASSES.items():
        if type(node) is cls:
            return name
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in PARTS:
        return str(node.this).lower()
    if isinstance(node, exp.Extract):
        unit = node.this.name.upper() if isinstance(node.this, exp.Expression) else str(node.this)
        if unit in ("YEAR", "MONTH", "DAY", "HOUR"):
            return unit.lower()
        if unit == "DAYOFWEEK":
            raise QueryError(
                "SQL: EXTRACT(DAYOFWEEK ...) counts from Sunday; write weekday(t) "
                "(ISO 8601: 1 = Monday .. 7 = Sunday)"
            )
        raise QueryError(f"SQL: EXTRACT({unit} ...): the parts are YEAR, MONTH, DAY, HOUR")
    return None


# --- literals and WHERE ---------------------------------------------------------------


def _literal(node: exp.Expression) -> str:
    """A value as the query language writes it."""
    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Literal | exp.RawString) and not isinstance(node, exp.ByteString):
        if isinstance(node, exp.RawString) or node.is_string:  # r'...': its text as is
            return "'" + str(node.this).replace("'", "''") + "'"
        return str(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.this
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        if node.to.is_type(*exp.DataType.NUMERIC_TYPES):
            return _typed_number(node)  # NUMERIC '4000', CAST('4000' AS INT64)
        return _literal(node.this)  # DATE '2013-06-01', TIMESTAMP '...'
    if isinstance(node, exp.Boolean):
        return "TRUE" if node.this else "FALSE"
    if isinstance(node, exp.Null):
        raise QueryError("SQL: a comparison with NULL is never true: write IS NULL or IS NOT NULL")
    raise QueryError(f"SQL: {shown(node)} is not a value (a number, 'text', DATE '...')")


def _typed_number(node: exp.Cast) -> str:
    """A number written as text of a number type (``NUMERIC '4000'``, ``CAST('4000' AS
    INT64)``) as the number itself: exact, as every number here is (an integer type
    takes only a whole number, as BigQuery's cast refuses ``'4000.5'``)."""
    text = str(node.this.this).strip()
    x = parse_number(text)
    if x is None:
        raise QueryError(f"SQL: {shown(node)}: {text!r} is not a number")
    if node.to.is_type(*exp.DataType.INTEGER_TYPES) and x.denominator != 1:
        raise QueryError(f"SQL: {shown(node)}: {text!r} is not a whole number")
    return text


def number(node: exp.Expression, what: str) -> Fraction:
    text = _literal(node)
    x = parse_number(text)
    if x is None:
        raise QueryError(f"SQL: {what} must be a number, got {text}")
    return x


def _is_value(node: exp.Expression) -> bool:
    try:
        _literal(node)
    except QueryError:
        return False
    return True


def where_text(node: exp.Expression, names: Names) -> str:
    """A WHERE (or a share's CASE WHEN) condition in the query language: the rows for
    which SQL finds it TRUE. SQL's logic has three values: a comparison with a missing
    value is UNKNOWN, neither true nor false, so ``NOT (x > 5)`` and ``x != 5`` leave the
    rows where x is missing out, where the query language's own NOT and ``!=`` take
    them in. Each node is therefore read into the rows where it is TRUE and the rows
    where it is FALSE (:func:`_truth`); the missing rows are in neither."""
    return _truth(node, names)[0]


def _truth(node: exp.Expression, names: Names) -> tuple[str, str]:
    """(TRUE rows, FALSE rows) of a condition, both as query-language text."""
    if isinstance(node, exp.Paren):
        return _truth(node.this, names)
    if isinstance(node, exp.And | exp.Or):  # a chain of one operator, read flat
        parts = [_truth(p, names) for p in _chain(node, type(node))]
        t_op, f_op = ("AND", "OR") if isinstance(node, exp.And) else ("OR", "AND")
        return (
            "(" + f" {t_op} ".join(t for t, _ in parts) + ")",
            "(" + f" {f_op} ".join(f for _, f in parts) + ")",
        )
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Is) and not isinstance(inner.expression, exp.Null):
            # (quoted whole: IS NOT TRUE, not the IS TRUE inside it)
            raise QueryError(f"SQL: {shown(node)}: only IS NULL and IS NOT NULL are supported")
        if isinstance(inner, exp.In | exp.Between):
            t, f = _truth(inner, names)
            return f, t
        t, f = _truth(inner, names)
        return f, t
    for cls, op in _COMPARE.items():
        if type(node) is cls:
            left, right = node.this, node.expression
            if _is_value(left) and not _is_value(right):
                left, right, op = right, left, _FLIP[op]
            if isinstance(right, exp.Column | exp.Sub) and not _is_value(right):
                dashed = dashed_name(right)
                if dashed is None:
                    raise QueryError(
                        f"SQL: {shown(node)} compares two columns; a predicate compares one "
                        "column with a value"
                    )
            term = names.term(left)
            value = _literal(right)
            negated = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
            return _leaf(names, node, left, f"{term} {op} {value}", f"{term} {negated} {value}")
    if isinstance(node, exp.Between):
        term = names.term(node.this)
        low, high = _literal(node.args["low"]), _literal(node.args["high"])
        return _leaf(
            names,
            node,
            node.this,
            f"{term} BETWEEN {low} AND {high}",
            f"{term} NOT BETWEEN {low} AND {high}",
        )
    if isinstance(node, exp.In):
        term = names.term(node.this)
        values = ", ".join(_literal(v) for v in in_list(node))
        return _leaf(names, node, node.this, f"{term} IN ({values})", f"{term} NOT IN ({values})")
    if isinstance(node, exp.Is):
        if not isinstance(node.expression, exp.Null):
            raise QueryError(f"SQL: {shown(node)}: only IS NULL and IS NOT NULL are supported")
        term = names.term(node.this)
        names.leaves.append((f"{term} IS NULL", node))
        return f"{term} IS NULL", f"{term} IS NOT NULL"  # never unknown
    if isinstance(node, exp.Boolean):
        return ("TRUE", "FALSE") if node.this else ("FALSE", "TRUE")
    if isinstance(node, exp.Column):  # a boolean column alone
        term = names.term(node)
        return _leaf(names, node, node, f"{term} = TRUE", f"{term} = FALSE")
    if isinstance(node, exp.Like | exp.ILike):
        raise QueryError("SQL: LIKE is not supported: a predicate compares one column with values")
    if isinstance(node, exp.Subquery | exp.Select | exp.Exists):
        raise QueryError(
            "SQL: subqueries are not supported: a predicate compares one column with values"
        )
    dashed = dashed_name(node)
    if dashed is not None:
        names.term(node)  # raises the backtick hint
    raise QueryError(
        f"SQL: {shown(node)} is not a predicate; write comparisons of a column (or a part "
        "such as month(t)) with values, BETWEEN, IN, IS NULL, joined by AND, OR, NOT"
    )


def in_list(node: exp.In) -> list[exp.Expression]:
    """The values ``x IN (...)`` or ``x IN UNNEST([...])`` lists (BigQuery writes an
    array's values either way). sqlglot keeps the second in ``In.unnest`` and leaves
    ``In.expressions`` empty: read alone, it would be an empty ``IN ()``, which holds
    for no row. An empty list is refused, as BigQuery refuses ``IN ()``."""
    if node.args.get("query") is not None:
        raise QueryError("SQL: IN (SELECT ...): subqueries are not supported; list the values")
    values = list(node.expressions)
    unnest = node.args.get("unnest")
    if unnest is not None:
        arrays = unnest.expressions
        if len(arrays) != 1 or not isinstance(arrays[0], exp.Array):
            raise QueryError(
                f"SQL: {shown(unnest)}: IN UNNEST takes an array of values written out, "
                "such as UNNEST(['a', 'b'])"
            )
        values = list(arrays[0].expressions)
    if not values:
        raise QueryError(f"SQL: {shown(node)}: IN needs at least one value")
    return values


def _chain(node: exp.Expression, op: type) -> list[exp.Expression]:
    """The operands of ``a op b op c ...`` (sqlglot nests them; read without recursion),
    parentheses around a same-operator chain included."""
    out: list[exp.Expression] = []
    stack = [node]
    while stack:
        n = stack.pop()
        while isinstance(n, exp.Paren) and isinstance(n.this, op):
            n = n.this  # type: ignore[assignment]
        if isinstance(n, op):
            stack.append(n.expression)
            stack.append(n.this)
        else:
            out.append(n)
    return out


def _leaf(
    names: Names, node: exp.Expression, term: exp.Expression, true: str, false: str
) -> tuple[str, str]:
    """A comparison's TRUE and FALSE rows: where its column may be missing, the FALSE
    rows are those with a value (the missing ones are UNKNOWN)."""
    names.leaves.append((true, node))
    column = term if isinstance(term, exp.Column) else next(term.find_all(exp.Column), None)
    if column is not None:
        attr = names.schema.attribute(names.column(column))
        if attr.missing is not None:
            name = render_name(attr.name)
            return f"({true} AND {name} IS NOT NULL)", f"({false} AND {name} IS NOT NULL)"
    return true, false


#: The position the query language puts first in a message: "column 33: ...".
_POSITION = re.compile(r"^column \d+: ")


def located(
    read: Callable[[], T], leaves: Sequence[tuple[str, exp.Expression]], schema: Schema
) -> T:
    """``read()`` (the query language reading a WHERE or a share's condition re-written
    from SQL), its refusal told in the SQL as written: a position in the re-written
    text would point at a column the user never wrote, so the comparison at fault is
    named instead (found by reading each comparison alone; if none fails alone, the
    message goes without a position)."""
    try:
        return read()
    except QueryError as err:
        message = str(err)
        if not _POSITION.match(message):
            raise
        for text, node in leaves:
            try:
                parse_query(text, schema)
            except QueryError as alone:
                raise QueryError(f"SQL: {shown(node)}: {_POSITION.sub('', str(alone))}") from None
        raise QueryError(f"SQL: {_POSITION.sub('', message)}") from None
