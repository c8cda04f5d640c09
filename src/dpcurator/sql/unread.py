"""What the translator reads of sqlglot's tree, and the refusal of everything else.

sqlglot parses far more than a DP SELECT answers, and keeps each clause or argument as
a named argument of a node: ``TABLESAMPLE`` is ``Table.sample``, ``FOR SYSTEM_TIME AS
OF`` ``Table.version``, ``SELECT AS STRUCT`` ``Select.kind``, ``IN UNNEST([...])``
``In.unnest``, a third part of a column's name ``Column.db``, ``GROUP BY ALL``
``Group.all``. The translator (:mod:`dpcurator.sql.select`, :mod:`~dpcurator.sql.where`,
:mod:`~dpcurator.sql.output`) reads the arguments it knows by name, so an argument it
does not know would be dropped without a word and the SELECT answered, and charged, as
if it had not been written. :func:`refuse_unread` therefore checks, before anything is
read, that every node of a kind the translator reads holds only the arguments it reads
(:data:`READ`): anything else is refused by name. A node of a kind not in
:data:`READ` is refused by the translator where it meets it, with its own message
(``LIKE``, a subquery, arithmetic on aggregates...), as every position it reads accepts
only the kinds it knows.
"""

from __future__ import annotations

from sqlglot import exp

from dpcurator.errors import QueryError
from dpcurator.sql.where import shown

__all__ = ["READ", "refuse_unread"]

_THIS = frozenset({"this"})
_BINARY = frozenset({"this", "expression"})

#: For each kind of node the translator reads, the arguments it reads (or that only
#: record how the text was spelled, such as a name's quotes or an array's brackets).
READ: dict[type, frozenset[str]] = {
    exp.Select: frozenset(
        {"expressions", "from_", "joins", "where", "group", "having", "order", "limit"}
    ),
    exp.From: _THIS,
    exp.Table: frozenset({"this", "alias", "db", "catalog"}),  # db, catalog: refused by name
    exp.TableAlias: _THIS,
    exp.Join: frozenset({"this", "on", "side", "kind", "using"}),
    exp.Where: _THIS,
    exp.Having: _THIS,
    exp.Group: frozenset({"expressions"}),
    exp.Order: frozenset({"expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"expression"}),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Column: frozenset({"this", "table"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: _THIS,
    exp.Paren: _THIS,
    exp.Not: _THIS,
    exp.Neg: _THIS,
    exp.And: _BINARY,
    exp.Or: _BINARY,
    exp.EQ: _BINARY,
    exp.NEQ: _BINARY,
    exp.LT: _BINARY,
    exp.LTE: _BINARY,
    exp.GT: _BINARY,
    exp.GTE: _BINARY,
    exp.Is: _BINARY,
    exp.Sub: _BINARY,  # read only to say that a dashed name needs backticks
    exp.Between: frozenset({"this", "low", "high"}),
    exp.In: frozenset({"this", "expressions", "query", "unnest"}),  # query: refused by name
    exp.Unnest: frozenset({"expressions"}),
    exp.Array: frozenset(
        {"expressions", "bracket_notation", "struct_name_inheritance", "value_constructor"}
    ),
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true", "false"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.Extract: _BINARY,
    exp.Year: _THIS,
    exp.Month: _THIS,
    exp.Day: _THIS,
    exp.Hour: _THIS,
    exp.Anonymous: frozenset({"this", "expressions"}),
    exp.Kwarg: _BINARY,
    exp.Tuple: frozenset({"expressions"}),
    exp.Var: _THIS,
    exp.Star: frozenset(),
    exp.Distinct: frozenset({"expressions"}),
    exp.Count: frozenset({"this", "expressions", "big_int"}),  # big_int: BigQuery's INT64
}

#: How the refusal names an unread argument that is a clause of its own.
_CLAUSES: dict[tuple[type, str], str] = {
    (exp.Select, "with_"): "WITH",
    (exp.Select, "distinct"): "SELECT DISTINCT",
    (exp.Select, "qualify"): "QUALIFY",
    (exp.Select, "windows"): "WINDOW",
    (exp.Select, "offset"): "OFFSET",
    (exp.Select, "laterals"): "LATERAL",
    (exp.Select, "pivots"): "PIVOT",
    (exp.Select, "sample"): "TABLESAMPLE",
    (exp.Select, "hint"): "a hint (/*+ ... */)",
    (exp.Select, "into"): "SELECT INTO",
    (exp.Select, "locks"): "FOR UPDATE",
    (exp.Table, "sample"): "TABLESAMPLE",
    (exp.Table, "version"): "FOR SYSTEM_TIME AS OF",
    (exp.Table, "system_time"): "FOR SYSTEM_TIME AS OF",
    (exp.Table, "pivots"): "PIVOT and UNPIVOT",
    (exp.Table, "hints"): "a table hint",
    (exp.Table, "joins"): "a nested join",
    (exp.Table, "laterals"): "LATERAL",
    (exp.TableAlias, "columns"): "naming a table's columns in its alias (AS t(a, b))",
    (exp.Join, "method"): "a join method (HASH, LOOKUP)",
    (exp.Group, "all"): "GROUP BY ALL",
    (exp.Group, "rollup"): "ROLLUP, CUBE and GROUPING SETS",
    (exp.Group, "cube"): "ROLLUP, CUBE and GROUPING SETS",
    (exp.Group, "grouping_sets"): "ROLLUP, CUBE and GROUPING SETS",
    (exp.Ordered, "with_fill"): "ORDER BY ... WITH FILL",
    (exp.Limit, "offset"): "OFFSET",
    (exp.Column, "db"): "a column named with more than its table (a.b.c)",
    (exp.Column, "catalog"): "a column named with more than its table (a.b.c)",
    (exp.Unnest, "alias"): "UNNEST(...) AS name",
    (exp.Unnest, "offset"): "UNNEST(...) WITH OFFSET",
    (exp.Distinct, "on"): "DISTINCT ON",
    (exp.Cast, "format"): "CAST(... FORMAT ...)",
    (exp.Star, "except_"): "* EXCEPT",
    (exp.Star, "replace"): "* REPLACE",
}


def _given(value: object) -> bool:
    """Whether an argument was written: sqlglot leaves the rest None, False or []."""
    return not (value is None or value is False or (isinstance(value, list) and not value))


def refuse_unread(tree: exp.Expression) -> None:
    """Refuse the first argument, anywhere in ``tree``, of a node of a kind in
    :data:`READ` that is not among the arguments read of that kind."""
    for node in tree.walk():
        read = READ.get(type(node))
        if read is None or not isinstance(node, exp.Expression):
            continue
        for key, value in node.args.items():
            if key in read or not _given(value):
                continue
            kind = type(node)
            if kind is exp.Select and key == "kind":
                raise QueryError(
                    f"SQL: SELECT AS {str(value).upper()} is not supported in a DP SELECT"
                )
            label = _CLAUSES.get((kind, key))
            if label is not None:
                raise QueryError(f"SQL: {label} is not supported in a DP SELECT")
            raise QueryError(
                f"SQL: {shown(node)}: its {key.strip('_').upper()} part is not supported in a DP "
                "SELECT"
            )
