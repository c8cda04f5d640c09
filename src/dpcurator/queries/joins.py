"""The public schema of two tables joined on their privacy unit.

``flights JOIN planes USING (tailnum)`` is a table of its own: each of its rows is a
pair of rows, one of each table, of the same unit (an inner join), and its domain is the
product of both domains. Its attributes are both tables' attributes; a name both tables
use (``year``: a flight's and a plane's) is kept twice, qualified (``flights.year``,
``planes.year``), and the unit's own column, when both tables list it, once (both hold
the same id). The joined table is named ``left JOIN right`` with the names in sorted
order, so that both ways of writing the join are one table (one budget filter, one set
of kept rows). Pure: names and domains, no data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from dpcurator.errors import QueryError
from dpcurator.queries.schema import Attribute, Schema

__all__ = ["JoinedSchema", "joined_name", "joined_schema"]


def joined_name(a: str, b: str) -> str:
    """The joined table's name: ``left JOIN right``, the table names in sorted order."""
    left, right = sorted((a, b))
    return f"{left} JOIN {right}"


@dataclass(frozen=True)
class JoinedSchema:
    """The joined table's schema, and where each of its attributes comes from."""

    name: str
    schema: Schema
    #: (table, attribute of that table) of each joined attribute, in schema order.
    sources: tuple[tuple[str, str], ...]

    def resolve(self, table: str | None, column: str) -> str | None:
        """The joined attribute ``column`` of ``table`` (None: unqualified) names, or None
        when it names none; an unqualified name both tables use is an error."""
        if table is not None:
            for (t, a), attr in zip(self.sources, self.schema.names, strict=True):
                if t == table and a == column:
                    return attr
            return None
        if column in self.schema:
            return column
        both = [f"{t}.{a}" for t, a in self.sources if a == column]
        if both:
            raise QueryError(f"column {column!r} is in both tables: write {' or '.join(both)}")
        return None


def joined_schema(a: str, schema_a: Schema, b: str, schema_b: Schema, unit: str) -> JoinedSchema:
    """The schema of ``a JOIN b`` on the unit column ``unit`` (see the module docstring):
    the left table's attributes, then the right's, in their own order."""
    name = joined_name(a, b)
    (left, sl), (right, sr) = sorted(((a, schema_a), (b, schema_b)), key=lambda p: p[0])
    shared = set(sl.names) & set(sr.names)
    attrs: list[Attribute] = []
    sources: list[tuple[str, str]] = []
    for table, schema in ((left, sl), (right, sr)):
        for attr in schema.attributes:
            if attr.name == unit and table == right and attr.name in sl:
                continue  # the unit's id, kept once (the left's)
            qualified = attr.name in shared and attr.name != unit
            attrs.append(replace(attr, name=f"{table}.{attr.name}") if qualified else attr)
            sources.append((table, attr.name))
    return JoinedSchema(name, Schema(tuple(attrs)), tuple(sources))


def join_named(table: str, schemas: Mapping[str, Schema], unit: str | None) -> JoinedSchema | None:
    """The join on the unit column ``unit`` that the table name ``table`` names (``a
    JOIN b``, as :func:`joined_name` writes it, of two tables of ``schemas``), or None:
    how a curator and a reader of its ledger alone both read a charge on a join."""
    left, sep, right = table.partition(" JOIN ")
    if not sep or unit is None or left not in schemas or right not in schemas:
        return None
    joined = joined_schema(left, schemas[left], right, schemas[right], unit)
    return joined if joined.name == table else None
