"""A DP ``SELECT`` read into a checked request: :func:`parse_select`.

The grammar (docs/sql.md)::

    [EXPLAIN] SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon= | rho= | mu=, delta=,
        privacy_unit_column=, max_rows_per_unit=, confidence=)
      <group columns and aggregates>
    FROM <table> [JOIN <table> USING (<unit>) | ON a.<unit> = b.<unit>]
    [WHERE <predicate>] [GROUP BY <columns or parts such as month(t)>]
    [HAVING <condition on outputs>] [ORDER BY <outputs>] [LIMIT n]

Aggregates: ``COUNT(*)``, ``COUNT(col)`` (rows where col is not missing), ``COUNT(DISTINCT
<unit>)``, ``SUM``/``AVG(col, contribution_bounds_per_group => (lo, hi))``,
``VAR_POP``/``STDDEV_POP(col, contribution_bounds_per_row => (lo, hi))``,
``PERCENTILE_CONT(col, p[, contribution_bounds_per_row => (lo, hi)])``, and ``AVG(CASE
WHEN <condition> THEN 1 ELSE 0 END)`` (or ``AVG(IF(<condition>, 1, 0))``): a share. The
WHERE clause is the query language of the rest of dpcurator (comparisons, ranges, IN,
IS NULL, AND/OR/NOT, parts of times), re-written from sqlglot's tree into that language
and parsed by it, so one predicate means one set of points everywhere.

Every refusal is one line naming what was written and what to write instead; nothing
here reads data or charges anything.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpcurator.errors import QueryError
from dpcurator.queries.joins import JoinedSchema, joined_schema
from dpcurator.queries.predicates import render_name
from dpcurator.queries.schema import Schema
from dpcurator.queries.statistic_request import StatisticRequest
from dpcurator.queries.values import decimal_text, parse_number
from dpcurator.sql.text import PREFIX, pre_parse, syntax_error
from dpcurator.sql.unread import refuse_unread
from dpcurator.sql.where import (
    Names,
    dashed_name,
    located,
    number,
    part_name,
    shown,
    where_text,
)

__all__ = ["Aggregate", "Options", "SelectRequest", "parse_select"]

#: The most rows a LIMIT may ask for.
MAX_LIMIT = 10**9
#: The statistic request each SQL aggregate is (besides COUNT).
_STATISTIC = {"sum": "sum", "avg": "mean", "var_pop": "variance", "stddev_pop": "stdev"}
_KINDS = {
    "DP_SUM": "sum",
    "DP_AVG": "avg",
    "DP_VAR_POP": "var_pop",
    "DP_STDDEV_POP": "stddev_pop",
    "DP_PERCENTILE_CONT": "percentile",
}
_BOUNDS = ("contribution_bounds_per_group", "contribution_bounds_per_row")


@dataclass(frozen=True)
class Options:
    """``OPTIONS(...)``: the SELECT's cost (one of epsilon, rho, mu, in the ledger's
    currency), an optional delta (with epsilon, on an (epsilon, delta) ledger), the unit
    it expects, and the intervals' level."""

    cost: tuple[str, Fraction]
    delta: Fraction | None = None
    unit_column: str | None = None
    max_rows_per_unit: int | None = None
    confidence: Fraction = Fraction(95, 100)


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the SELECT list: its output column, its SQL, and the statistic it
    asks for as the same :class:`~dpcurator.queries.statistic_request.StatisticRequest` a
    statistics method or a workload line builds (its ``where`` and ``by`` the SELECT's):
    ``COUNT(*)`` and ``COUNT(col)`` a ``count`` (of rows, of rows with a value of
    ``col``), ``COUNT(DISTINCT <unit>)`` ``units``, ``SUM`` a ``sum``, ``AVG`` a
    ``mean`` (of a ``CASE WHEN`` indicator: a ``share``), ``VAR_POP`` a ``variance``,
    ``STDDEV_POP`` a ``stdev`` and ``PERCENTILE_CONT`` a ``quantile`` (its bounds the
    candidates' range)."""

    name: str  # its output column
    text: str  # as SQL, canonical
    request: StatisticRequest

    @property
    def kind(self) -> str:
        return self.request.kind

    @property
    def column(self) -> str | None:
        return self.request.attribute or None

    @property
    def lower(self) -> Fraction | None:
        return self.request.lower  # type: ignore[no-any-return]

    @property
    def upper(self) -> Fraction | None:
        return self.request.upper  # type: ignore[no-any-return]

    @property
    def q(self) -> Fraction | None:
        return self.request.qs[0] if self.request.qs else None

    @property
    def condition(self) -> str:
        return self.request.condition  # type: ignore[return-value]


@dataclass(frozen=True)
class SelectRequest:
    """A DP SELECT, checked: what to measure and how to shape the answer."""

    text: str
    explain: bool
    options: Options
    table: str  # the table, or the joined table ``a JOIN b``
    join: JoinedSchema | None
    where: str | None  # the query language's text of WHERE (None: every row)
    groups: tuple[str, ...]  # group terms: attribute names or parts (month(t))
    #: the SELECT list in order: (output name, "group" or "aggregate", index)
    outputs: tuple[tuple[str, str, int], ...]
    aggregates: tuple[Aggregate, ...]
    having: Any = field(default=None, compare=False)  # a compiled condition (see output)
    order: tuple[tuple[int, bool, bool], ...] = ()  # (output, descending, nulls first)
    limit: int | None = None
    #: the comparisons of WHERE and of the shares' conditions: (query-language text, SQL
    #: as written), for :meth:`located` to name the one the query language refuses
    leaves: tuple[tuple[str, exp.Expression], ...] = field(default=(), compare=False)

    def located(self, read: Callable[[], Any], schema: Schema) -> Any:
        """``read()`` of the WHERE or a share's condition, a refusal naming the
        comparison as written rather than a position in the re-written text."""
        return located(read, self.leaves, schema)

    @property
    def columns(self) -> tuple[str, ...]:
        """The answer's columns: group columns first, then each aggregate's value and
        its interval's ends (``<name>``, ``<name>_low``, ``<name>_high``)."""
        groups = [n for n, kind, _ in self.outputs if kind == "group"]
        aggs = [n for n, kind, _ in self.outputs if kind == "aggregate"]
        return (*groups, *(c for n in aggs for c in (n, f"{n}_low", f"{n}_high")))


# --- the SELECT list ------------------------------------------------------------------


#: The largest cost a 64-bit float holds (the noise is computed in floats).
_LARGEST_FLOAT = Fraction(sys.float_info.max)


def _bounds(args: Sequence[exp.Expression], what: str) -> tuple[Fraction, Fraction] | None:
    """The bounds among an aggregate's arguments, if given: once (the two keywords mean
    the same here, so both, or one twice, is refused rather than one of them dropped)."""
    found = None
    for a in args:
        if not isinstance(a, exp.Kwarg):
            continue
        key = a.this.name.lower()
        if key not in _BOUNDS:
            raise QueryError(
                f"SQL: {what}: unknown argument {key} => ...; the bounds are "
                "contribution_bounds_per_group => (lower, upper)"
            )
        if found is not None:
            raise QueryError(f"SQL: {what}: bounds given twice; give {key} => (lower, upper) once")
        pair = a.expression
        if not isinstance(pair, exp.Tuple) or len(pair.expressions) != 2:
            raise QueryError(f"SQL: {what}: {key} => (lower, upper), two numbers")
        lo, hi = (number(v, f"{what}'s bound") for v in pair.expressions)
        if lo >= hi:
            raise QueryError(f"SQL: {what}: the bounds need lower < upper")
        found = (lo, hi)
    return found


def _share_condition(node: exp.Expression, names: Names) -> str | None:
    """``CASE WHEN c THEN 1 ELSE 0 END`` or ``IF(c, 1, 0)``: the condition's text."""

    def one(v: exp.Expression | None, want: str) -> bool:
        return isinstance(v, exp.Literal) and not v.is_string and parse_number(v.this) == int(want)

    if isinstance(node, exp.Case) and len(node.args.get("ifs") or []) == 1 and node.this is None:
        branch = node.args["ifs"][0]
        if one(branch.args.get("true"), "1") and one(node.args.get("default"), "0"):
            return where_text(branch.this, names)
    if (
        isinstance(node, exp.If)
        and one(node.args.get("true"), "1")
        and one(node.args.get("false"), "0")
    ):
        return where_text(node.this, names)
    return None


def _aggregate(
    node: exp.Expression,
    name: str,
    text: str,
    names: Names,
    unit: str | None,
    where: str | None,
    groups: Sequence[str],
) -> Aggregate | None:
    """The aggregate ``node`` (written ``text``) is, or None if it is no aggregate; over
    the rows ``where`` reads, per group of ``groups``."""

    def ask(kind: str, **fields: Any) -> StatisticRequest:
        return StatisticRequest(kind, **fields, where=where, by=tuple(groups))

    if isinstance(node, exp.Count):
        _count_arguments(node)
        inner = node.this
        literal = inner.this if isinstance(inner, exp.Neg) else inner  # COUNT(-1) too
        if isinstance(inner, exp.Star) or (
            isinstance(literal, exp.Literal) and parse_number(str(literal.this)) is not None
        ):  # COUNT(1): 1 is never NULL, so every row is counted, as by COUNT(*)
            return Aggregate(name, "COUNT(*)", ask("count"))
        if isinstance(inner, exp.Distinct):
            cols = inner.expressions
            if len(cols) != 1 or not isinstance(cols[0], exp.Column):
                raise QueryError("SQL: COUNT(DISTINCT ...) takes the privacy unit's column")
            col = cols[0].name
            if unit is None:
                raise QueryError(
                    "SQL: COUNT(DISTINCT ...) counts privacy units; this curator protects "
                    "each row (it has no privacy unit)"
                )
            if col != unit:
                raise QueryError(
                    f"SQL: COUNT(DISTINCT {col}): only the privacy unit's column ({unit}) is "
                    "counted distinctly"
                )
            return Aggregate(name, f"COUNT(DISTINCT {unit})", ask("units"))
        if isinstance(inner, exp.Column):
            col = names.column(inner)
            return Aggregate(name, f"COUNT({render_name(col)})", ask("count", attribute=col))
        raise QueryError(f"SQL: {text}: COUNT takes *, 1, a column or DISTINCT <unit>")
    if not (isinstance(node, exp.Anonymous) and str(node.this).upper() in _KINDS):
        return None
    kind = _KINDS[str(node.this).upper()]
    what = kind.upper() if kind != "percentile" else "PERCENTILE_CONT"
    args = list(node.expressions)
    positional = [a for a in args if not isinstance(a, exp.Kwarg)]
    if not positional:
        raise QueryError(f"SQL: {what}() needs a column")
    if kind == "avg":
        cond = _share_condition(positional[0], names)
        if cond is not None:
            if len(args) != 1:
                raise QueryError("SQL: AVG(CASE WHEN ... THEN 1 ELSE 0 END) takes no bounds")
            return Aggregate(name, text, ask("share", condition=cond))
    first = positional[0]
    if not isinstance(first, exp.Column):
        dashed = dashed_name(first)
        if dashed is not None:
            names.term(first)
        raise QueryError(
            f"SQL: {text}: {what} takes a column (or, for AVG, CASE WHEN <condition> THEN 1 "
            "ELSE 0 END)"
        )
    col = names.column(first)
    attr = names.schema.attribute(col)
    bounds = _bounds(args, what)
    if kind == "percentile":
        if len(positional) != 2:
            raise QueryError(f"SQL: PERCENTILE_CONT({col}, p): give the percentile p in [0, 1]")
        q = number(positional[1], "the percentile")
        if not 0 <= q <= 1:
            raise QueryError(f"SQL: PERCENTILE_CONT's p must be in [0, 1], got {decimal_text(q)}")
        if not attr.ordered:
            raise QueryError(
                f"SQL: PERCENTILE_CONT needs an ordered column; {col!r} is {attr.type}"
            )
        lo, hi = bounds if bounds is not None else (None, None)
        return Aggregate(name, text, ask("quantile", attribute=col, qs=(q,), lower=lo, upper=hi))
    if len(positional) != 1:
        raise QueryError(f"SQL: {text}: {what} takes one column and its bounds")
    if not attr.numeric:
        raise QueryError(f"SQL: {what}({col}) needs a number column; {col!r} is {attr.type}")
    if bounds is None:
        key = "contribution_bounds_per_row" if kind in ("var_pop", "stddev_pop") else _BOUNDS[0]
        raise QueryError(
            f"SQL: {what}({col}) needs bounds: write {what}({render_name(col)}, {key} => "
            "(lower, upper))"
        )
    return Aggregate(
        name, text, ask(_STATISTIC[kind], attribute=col, lower=bounds[0], upper=bounds[1])
    )


def _count_arguments(node: exp.Count) -> None:
    """Refuse what COUNT holds besides its one argument (sqlglot keeps the rest in
    ``Count.expressions``): BigQuery's ``contribution_bounds_per_group`` for COUNT bounds
    each unit's count per group, which here is always its k kept rows, so a bound given
    would be ignored; any other argument has no meaning."""
    for a in node.expressions:
        if isinstance(a, exp.Kwarg) and a.this.name.lower() in _BOUNDS:
            raise QueryError(
                f"SQL: COUNT takes no {a.this.name.lower()}: each privacy unit adds at most "
                "its max_rows_per_unit kept rows (1 per row without a unit); leave it out"
            )
        if isinstance(a, exp.Kwarg):
            raise QueryError(f"SQL: COUNT: unknown argument {a.this.name.lower()} => ...")
        raise QueryError(
            f"SQL: COUNT takes one argument (*, a column or DISTINCT <unit>), got {shown(node)}"
        )


def _has_aggregate(node: exp.Expression) -> bool:
    return any(
        isinstance(n, exp.Count | exp.AggFunc)
        or (isinstance(n, exp.Anonymous) and str(n.this).upper() in _KINDS)
        for n in node.walk()
    )


# --- OPTIONS --------------------------------------------------------------------------


def _options(pairs: Sequence[tuple[str, str]]) -> Options:
    seen: dict[str, str] = {}
    for k, v in pairs:
        if k in seen:
            raise QueryError(f"SQL: OPTIONS gives {k} twice")
        seen[k] = v
    known = {
        "epsilon",
        "rho",
        "mu",
        "delta",
        "privacy_unit_column",
        "max_rows_per_unit",
        "confidence",
    }
    if "max_groups_contributed" in seen:
        raise QueryError(
            "SQL: OPTIONS max_groups_contributed: a unit here adds at most its "
            "max_rows_per_unit kept rows to all groups together (the ledger's k); leave it out"
        )
    odd = sorted(set(seen) - known)
    if odd:
        raise QueryError(
            f"SQL: OPTIONS: unknown option {odd[0]}; the options are "
            "epsilon (or rho, or mu), delta, privacy_unit_column, max_rows_per_unit, confidence"
        )
    costs = [(k, seen[k]) for k in ("epsilon", "rho", "mu") if k in seen]
    if len(costs) != 1:
        raise QueryError("SQL: OPTIONS needs the SELECT's cost: one of epsilon=, rho= or mu=")

    def num(key: str) -> Fraction:
        x = parse_number(seen[key])
        if x is None:
            raise QueryError(f"SQL: OPTIONS {key} must be a number, got {seen[key]}")
        return x

    cost = (costs[0][0], num(costs[0][0]))
    if cost[1] <= 0:
        raise QueryError(f"SQL: OPTIONS {cost[0]} must be positive")
    if cost[1] > _LARGEST_FLOAT:  # the noise is computed in floats: it would overflow
        raise QueryError(
            f"SQL: OPTIONS {cost[0]}={seen[cost[0]]} is too large: beyond a 64-bit float"
        )
    if float(cost[1]) == 0:  # the noise is computed in floats: it would read 0
        raise QueryError(
            f"SQL: OPTIONS {cost[0]}={seen[cost[0]]} is too small: it underflows to 0 as a "
            f"64-bit float (such an answer would be pure noise); spend more {cost[0]}"
        )
    delta = num("delta") if "delta" in seen else None
    if delta is not None and not 0 <= delta < 1:
        raise QueryError("SQL: OPTIONS delta must be in [0, 1)")
    rows_per_unit = None
    if "max_rows_per_unit" in seen:
        x = num("max_rows_per_unit")
        if x.denominator != 1 or x < 1:
            raise QueryError("SQL: OPTIONS max_rows_per_unit must be a positive integer")
        rows_per_unit = int(x)
    confidence = num("confidence") if "confidence" in seen else Fraction(95, 100)
    if not 0 < confidence < 1:
        raise QueryError("SQL: OPTIONS confidence must be in (0, 1), e.g. 0.95")
    if not 0 < float(1 - confidence) < 1:  # the intervals compute alpha = 1 - confidence
        raise QueryError(
            f"SQL: OPTIONS confidence={seen['confidence']} is too close to "
            f"{'0' if confidence < Fraction(1, 2) else '1'} for a 64-bit float's 1 - confidence; "
            "give a confidence in (0, 1) such as 0.95"
        )
    unit = seen.get("privacy_unit_column")
    return Options(cost, delta, unit, rows_per_unit, confidence)


# --- the whole SELECT -----------------------------------------------------------------


def parse_select(
    text: object,
    schemas: Mapping[str, Schema],
    *,
    unit: str | None = None,
    having: Callable[[Any, Mapping[str, int], Sequence[str]], Any] | None = None,
) -> SelectRequest:
    """Read a DP SELECT against the curator's tables (``schemas``) and its privacy unit's
    column (``unit``, None: each row is its own unit). ``having`` compiles a HAVING
    condition over the outputs (see :mod:`dpcurator.sql.output`)."""
    pre = pre_parse(text)
    if not pre.has_clause:
        raise QueryError(
            "SQL: a SELECT without WITH DIFFERENTIAL_PRIVACY would read rows; write SELECT "
            "WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=...) ..."
        )
    options = _options(pre.options)
    try:
        trees = sqlglot.parse(pre.text, read="bigquery")
    except SqlglotError as err:
        raise syntax_error(err, pre) from None
    except RecursionError:  # a shape the token bounds let through
        raise QueryError("SQL: nested too deeply") from None
    if len(trees) != 1 or trees[0] is None:
        raise QueryError("SQL: give one SELECT")
    tree = trees[0]
    if not isinstance(tree, exp.Select):
        raise QueryError(f"SQL: expected one SELECT, got {type(tree).__name__.upper()}")
    if any(isinstance(n, exp.Subquery | exp.Exists) for n in tree.walk()):
        raise QueryError(
            "SQL: subqueries are not supported; one SELECT reads one table or a join on the unit"
        )
    if any(isinstance(n, exp.Window) for n in tree.walk()):
        raise QueryError("SQL: window functions (OVER) are not supported")
    refuse_unread(tree)  # nothing written may be dropped unread
    table, join, names = _from(tree, schemas, unit)
    if options.unit_column is not None:
        if unit is None:
            raise QueryError(
                "SQL: OPTIONS privacy_unit_column: this curator protects each row (it has no "
                "privacy unit); leave the option out"
            )
        if options.unit_column != unit:
            raise QueryError(
                f"SQL: OPTIONS privacy_unit_column={options.unit_column}: this curator's "
                f"privacy unit is {unit}"
            )
    where = None
    if tree.args.get("where") is not None:
        where = where_text(tree.args["where"].this, names)
    groups = _group_by(tree, names)
    outputs: list[tuple[str, str, int]] = []
    aggregates: list[Aggregate] = []
    items = tree.expressions
    if any(isinstance(i, exp.Star) for i in items):
        raise QueryError("SQL: SELECT * would return rows; select aggregates (and group columns)")
    if not items:
        raise QueryError("SQL: SELECT needs at least one aggregate")
    texts: list[str] = []  # each output as written, for HAVING and ORDER BY to name
    for item in items:
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        written = node.sql(dialect="bigquery").replace(PREFIX, "")
        texts.append(written.lower())
        shown = written if len(written) <= 60 else written[:57] + "..."
        agg = _aggregate(
            node, alias or _default_name(node, written), written, names, unit, where, groups
        )
        if agg is not None:
            outputs.append((agg.name, "aggregate", len(aggregates)))
            aggregates.append(agg)
            continue
        if _has_aggregate(node):
            raise QueryError(
                f"SQL: {shown}: aggregates are answered as they are; arithmetic on them "
                "(e.g. SUM(x) / COUNT(*)) is not supported: ask for AVG"
            )
        try:
            term = _plain_term(names, node)
        except QueryError:
            old = _old_syntax(node)
            if old is not None:
                raise QueryError(old) from None
            raise QueryError(f"SQL: {shown} is neither a group column nor an aggregate") from None
        if term not in groups:
            raise QueryError(
                f"SQL: column {shown} is neither grouped nor aggregated: add it to GROUP BY"
            )
        outputs.append((alias or _default_name(node, written), "group", groups.index(term)))
    if not aggregates:
        raise QueryError(
            "SQL: a DP SELECT answers aggregates; add one, such as COUNT(*) (group columns "
            "alone would list the groups)"
        )
    request = SelectRequest(
        text=str(text).strip(),
        explain=pre.explain,
        options=options,
        table=table,
        join=join,
        where=where,
        groups=tuple(groups),
        outputs=tuple(outputs),
        aggregates=tuple(aggregates),
        leaves=tuple(names.leaves),
    )
    _unique(request)
    # BigQuery's names are case-insensitive; _unique keeps them apart so
    positions = {n.casefold(): i for i, (n, _, _) in enumerate(outputs)}
    having_clause = None
    if tree.args.get("having") is not None:
        if having is None:
            raise QueryError("SQL: HAVING is not supported here")
        having_clause = having(tree.args["having"].this, positions, texts)
    order = _order(tree, positions, texts)
    return replace(request, having=having_clause, order=order, limit=_limit(tree))


def _unique(request: SelectRequest) -> None:
    """Refuse an answer with two columns of one name (compared as BigQuery compares
    names, without case): two outputs of one name, or an alias equal to another
    aggregate's ``_low`` or ``_high`` column. pandas would keep both columns while
    Arrow, Parquet and JSON keep one, losing the other's values, and HAVING or ORDER BY
    could not say which it names."""
    named = [n.casefold() for n, _, _ in request.outputs]
    seen: set[str] = set()
    for c in request.columns:
        key = c.casefold()
        if key not in seen:
            seen.add(key)
        elif named.count(key) > 1:
            raise QueryError(f"SQL: two outputs are named {c}: give one an alias (AS ...)")
        else:
            raise QueryError(
                f"SQL: the answer would have two columns named {c} (an aggregate AS n also "
                "answers n_low and n_high): rename one output (AS ...)"
            )


def _old_syntax(node: exp.Expression) -> str | None:
    """The hint for BigQuery's old ANON_ aggregates, which a user may still write."""
    if isinstance(node, exp.Anonymous) and str(node.this).upper().startswith("ANON_"):
        name = str(node.this).upper()
        new = {"ANON_COUNT": "COUNT", "ANON_SUM": "SUM", "ANON_AVG": "AVG"}.get(name)
        if new is not None:
            return f"SQL: {name} is BigQuery's old syntax: write {new}(...) in a SELECT WITH DIFFERENTIAL_PRIVACY"
        return f"SQL: {name} is BigQuery's old syntax and has no counterpart here"
    return None


def _canonical(node: exp.Expression) -> str:
    return node.sql(dialect="bigquery").replace(PREFIX, "").lower()


def _default_name(node: exp.Expression, written: str) -> str:
    """An output's name without an alias: a column's own name, a part as the query
    language writes it (``month(time_hour)``), else the expression as written."""
    if isinstance(node, exp.Column):
        return node.name
    part = part_name(node) if not isinstance(node, exp.Count) else None
    if part is not None:
        inner = (
            node.expressions[0]
            if isinstance(node, exp.Anonymous)
            else (node.expression if isinstance(node, exp.Extract) else node.this)
        )
        if isinstance(inner, exp.Column):
            return f"{part}({inner.name})"
    return written


def _plain_term(names: Names, node: exp.Expression) -> str:
    """A group term written in SQL, as the curator's group terms are (``month(t)``)."""
    if isinstance(node, exp.Column):
        return names.column(node)
    text = names.term(node)
    return text  # part(name): render_name'd inside, as group_term reads it


def _group_by(tree: exp.Select, names: Names) -> list[str]:
    group = tree.args.get("group")
    if group is None:
        return []
    items = tree.expressions
    out: list[str] = []
    for g in group.expressions:
        node = g
        if isinstance(g, exp.Literal) and not g.is_string:  # GROUP BY 1: the first output
            i = _position(g, len(items), "GROUP BY")
            node = items[i].this if isinstance(items[i], exp.Alias) else items[i]
        elif isinstance(g, exp.Column) and not g.table:
            node = _aliased(g, items, names)
        if _has_aggregate(node):
            raise QueryError(f"SQL: GROUP BY {shown(node)}: an aggregate is not a group")
        term = _plain_term(names, node)
        if term in out:
            raise QueryError(f"SQL: GROUP BY names {shown(node)} twice")
        out.append(term)
    return out


def _aliased(g: exp.Column, items: Sequence[exp.Expression], names: Names) -> exp.Expression:
    """What a GROUP BY name means: the table's column of that name if there is one (as in
    BigQuery, a column comes before an alias in GROUP BY), else the SELECT item with
    that alias (compared without case, as BigQuery compares aliases), else the name
    itself (refused as an unknown column where it is read)."""
    try:
        names.column(g)
        return g
    except QueryError:
        pass
    key = g.name.casefold()
    for item in items:
        if isinstance(item, exp.Alias) and item.alias.casefold() == key:
            return item.this
    return g


def _position(node: exp.Literal, n: int, where: str) -> int:
    """A GROUP BY or ORDER BY position (1 for the first output) as an index."""
    if not node.this.isdigit():
        raise QueryError(
            f"SQL: {where} {node.this}: a position is a whole number, 1 for the first output"
        )
    i = int(node.this) - 1
    if not 0 <= i < n:
        raise QueryError(f"SQL: {where} {node.this}: there are {n} outputs")
    return i


def _order(
    tree: exp.Select, positions: Mapping[str, int], texts: Sequence[str]
) -> tuple[tuple[int, bool, bool], ...]:
    order = tree.args.get("order")
    if order is None:
        return ()
    out = []
    for o in order.expressions:
        node = o.this
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        if nulls_first is None:
            nulls_first = not desc  # BigQuery: NULLS FIRST ascending, LAST descending
        out.append((output_index(node, positions, texts, "ORDER BY"), desc, bool(nulls_first)))
    return tuple(out)


def output_index(
    node: exp.Expression, positions: Mapping[str, int], texts: Sequence[str], where: str
) -> int:
    """The output an ORDER BY or HAVING reference names: a position, a name (an alias or
    a group column), or an expression written as in the SELECT list."""
    if isinstance(node, exp.Literal) and not node.is_string:
        return _position(node, len(texts), where)
    if isinstance(node, exp.Column) and node.name.casefold() in positions:
        return positions[node.name.casefold()]  # an alias, as BigQuery's: without case
    canonical = _canonical(node)
    if canonical in texts:
        return texts.index(canonical)
    raise QueryError(
        f"SQL: {where} {shown(node)}: name an output of the SELECT (its alias, position or "
        "expression as written there)"
    )


def _limit(tree: exp.Select) -> int | None:
    limit = tree.args.get("limit")
    if limit is None:
        return None
    node = limit.expression
    if not (isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit()):
        raise QueryError(f"SQL: LIMIT takes a whole number, got {shown(node)}")
    n = int(node.this)
    if n > MAX_LIMIT:
        raise QueryError(f"SQL: LIMIT {n} is over {MAX_LIMIT}")
    if n == 0:  # refused before the charge: it would spend the cost on no answer
        raise QueryError("SQL: LIMIT 0 answers no row; nothing is charged for it")
    return n


def _from(
    tree: exp.Select, schemas: Mapping[str, Schema], unit: str | None
) -> tuple[str, JoinedSchema | None, Names]:
    src = tree.args.get("from_") or tree.args.get("from")
    if src is None:
        raise QueryError("SQL: FROM <table> is missing")
    first = src.this
    if not isinstance(first, exp.Table):
        raise QueryError("SQL: FROM takes a table (subqueries are not supported)")
    joins = tree.args.get("joins") or []
    if len(joins) > 1:
        raise QueryError("SQL: one JOIN at most (two tables joined on the privacy unit)")
    tables: dict[str, str] = {}

    def table_of(t: exp.Table) -> str:
        name = t.name
        if t.args.get("db") or t.args.get("catalog"):
            raise QueryError(f"SQL: {t.sql()}: name the table alone")
        if name not in schemas and len(schemas) == 1 and not joins:
            name = next(iter(schemas))  # one table: FROM may call it by any name
        if name not in schemas:
            known = ", ".join(sorted(schemas))
            raise QueryError(f"SQL: unknown table {name!r}; the tables are {known}")
        tables[name] = name
        tables[t.name] = name
        if t.alias:
            tables[t.alias] = name
        return name

    a = table_of(first)
    if not joins:
        schema = schemas[a]
        return a, None, Names(schema, tables, None)
    j = joins[0]
    if not isinstance(j.this, exp.Table):
        raise QueryError("SQL: JOIN takes a table (subqueries are not supported)")
    side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
    if side or kind not in ("", "INNER"):
        raise QueryError(
            f"SQL: {' '.join(x for x in (side, kind) if x)} JOIN: only an inner JOIN on the "
            "privacy unit is supported"
        )
    b = table_of(j.this)
    if a == b:
        raise QueryError("SQL: a table joined with itself is not supported")
    if unit is None:
        raise QueryError(
            "SQL: JOIN needs a privacy unit shared by the tables (the curator protects each "
            "row; a join on anything else is not supported)"
        )
    using = j.args.get("using")
    on = j.args.get("on")
    if using:
        cols = [u.name for u in using]
        if cols != [unit]:
            raise QueryError(
                f"SQL: JOIN ... USING ({', '.join(cols)}): joins are on the privacy unit only: "
                f"USING ({unit})"
            )
    elif on is not None:
        if not (
            isinstance(on, exp.EQ)
            and isinstance(on.this, exp.Column)
            and isinstance(on.expression, exp.Column)
            and on.this.name == unit
            and on.expression.name == unit
            and {tables.get(on.this.table or "", ""), tables.get(on.expression.table or "", "")}
            == {a, b}
        ):
            raise QueryError(
                f"SQL: JOIN ... ON {shown(on)}: joins are on the privacy unit only: "
                f"ON {a}.{unit} = {b}.{unit} (or USING ({unit}))"
            )
    else:
        raise QueryError(f"SQL: a cross join is not supported: JOIN ... USING ({unit})")
    joined = joined_schema(a, schemas[a], b, schemas[b], unit)
    return joined.name, joined, Names(joined.schema, tables, joined)
