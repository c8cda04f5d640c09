"""Boolean predicate queries: a union of disjoint boxes that acts as one query.

``parse_query("age < 30 OR sex = 'Female'", schema)`` covers no single box, so it is a
:class:`BooleanQuery`: its ``boxes`` are pairwise-disjoint conjunctions
(:class:`~dpcurator.queries.predicates.Query`), and it is still one query — one charge,
one count, one row of output. Everything that handles queries reads their ``boxes``
(a conjunction's are itself): the maximum-overlap solver gives each box its query's
weight, the curator's filter charges each box's points once, and the backends add the
boxes' counts. Disjointness makes all of these exact (see :mod:`dpcurator.queries.boxes`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dpcurator import deadlines
from dpcurator.errors import QueryError
from dpcurator.queries import boxes as bx
from dpcurator.queries.predicates import IntervalSet, Query, disjoint, intersect
from dpcurator.queries.schema import Schema


@dataclass(frozen=True)
class BooleanQuery:
    """A union of at least two pairwise-disjoint, non-empty boxes (conjunctions).

    Build it with :meth:`from_boxes` (any boxes: they are made disjoint) or by parsing;
    the plain constructor checks that the boxes it is given are disjoint.
    """

    schema: Schema = field(compare=False, repr=False)
    boxes: tuple[Query, ...]
    text: str = field(default="", compare=False)
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.schema, Schema):
            raise QueryError(f"a query needs a Schema, got {type(self.schema).__name__}")
        parts = self.boxes
        if not isinstance(parts, tuple) or not all(isinstance(b, Query) for b in parts):
            raise QueryError("a boolean query's boxes must be a tuple of Query objects")
        if len(parts) < 2:
            raise QueryError("a boolean query has at least two boxes (else it is a Query)")
        if len(parts) > bx.MAX_BOXES:
            raise QueryError(f"a boolean query has at most {bx.MAX_BOXES} boxes")
        for b in parts:
            if b.schema is not self.schema and b.schema != self.schema:
                raise QueryError("every box of a boolean query must use its schema")
            if b.is_empty:
                raise QueryError("a boolean query's boxes must not be empty")
        if not getattr(self, "_trusted", False):
            for a, b in itertools.combinations(parts, 2):
                if not disjoint(a, b):
                    raise QueryError(
                        "a boolean query's boxes must be pairwise disjoint; build it with "
                        "BooleanQuery.from_boxes to have them made so"
                    )
        if not isinstance(self.text, str):
            raise QueryError("a query's text must be a string")
        if not self.text:
            object.__setattr__(self, "text", self.to_text())

    @classmethod
    def from_boxes(
        cls,
        schema: Schema,
        boxes: Iterable[Query | Mapping[str, IntervalSet]],
        text: str = "",
        line: int | None = None,
    ) -> Query | BooleanQuery:
        """The union of ``boxes`` (queries or coverage mappings, overlapping or not) as
        one query: a :class:`Query` when it is a single box (or nothing), else a
        :class:`BooleanQuery` of disjoint boxes."""
        parts: list[bx.Box] = []
        for b in boxes:
            covs = (
                {p.attribute.name: p.coverage for p in b.predicates}
                if isinstance(b, Query)
                else dict(b)
            )
            if isinstance(b, Query) and b.is_empty:
                continue
            box = bx.box_of(schema, covs)
            if box is not None:
                parts = bx.disjoint_union(parts, [box], schema)
        return make(schema, parts, text, line)

    # --- the query interface ----------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return False

    @property
    def attributes(self) -> tuple[str, ...]:
        """Names of the attributes some box constrains, in schema order."""
        names = {n for b in self.boxes for n in b.attributes}
        return tuple(sorted(names, key=self.schema.index))

    def covers(self, point: dict[str, int | float | str]) -> bool:
        return any(b.covers(point) for b in self.boxes)

    def to_text(self) -> str:
        """Query text that parses back to the same coverage."""
        return " OR ".join(f"({b.to_text()})" for b in self.boxes)

    def __str__(self) -> str:
        return self.text or self.to_text()


def make(
    schema: Schema, parts: list[bx.Box], text: str = "", line: int | None = None
) -> Query | BooleanQuery:
    """The query covering ``parts`` (disjoint boxes, trusted): a conjunction when there
    is at most one box."""
    if not parts:
        return Query.from_coverages(schema, {schema.names[0]: ()}, text=text or "FALSE", line=line)
    if len(parts) == 1:
        return Query.from_coverages(schema, parts[0], text=text, line=line)
    order = sorted(parts, key=lambda b: sorted(b.items()))
    q = BooleanQuery.__new__(BooleanQuery)
    object.__setattr__(q, "_trusted", True)
    BooleanQuery.__init__(
        q,
        schema,
        # the boxes' own texts are not rendered: a union's text is its own (given, or
        # rendered from the boxes once), and rendering thousands of IN lists per batch
        # was a third of the time to parse one
        tuple(Query.from_coverages(schema, b, render=False) for b in order),
        text,
        line,
    )
    object.__delattr__(q, "_trusted")
    return q


def boxes_of(q: Query | BooleanQuery) -> tuple[Query, ...]:
    """The disjoint non-empty boxes of a query (none for a contradiction)."""
    if isinstance(q, BooleanQuery):
        return q.boxes
    return () if q.is_empty else (q,)


def intersection(
    q: Query | BooleanQuery, other: Query | BooleanQuery, text: str | None = None
) -> Query | BooleanQuery:
    """The query covering C_q ∩ C_other (with q's text unless ``text`` is given; ""
    gives the canonical text)."""
    schema = q.schema
    parts = []
    for a in boxes_of(q):
        deadlines.check()
        for b in boxes_of(other):
            m = bx.meet(_box(a), _box(b))
            if m is not None:
                parts.append(m)
    return make(schema, parts, q.text if text is None else text, q.line)


def _box(q: Query) -> bx.Box:
    return {p.attribute.name: p.coverage for p in q.predicates}


def contains(outer: Query | BooleanQuery, inner: Query | BooleanQuery) -> bool:
    """A sufficient test of C_inner ⊆ C_outer: every box of inner lies inside one box
    of outer (exact for conjunctions; may say False for some unions that do cover)."""
    return all(any(_box_inside(b, a) for a in boxes_of(outer)) for b in boxes_of(inner))


def _box_inside(inner: Query, outer: Query) -> bool:
    return all(
        intersect(inner.coverage(p.attribute.name), p.coverage) == inner.coverage(p.attribute.name)
        for p in outer.predicates
    )


def hull(q: Query | BooleanQuery) -> dict[str, tuple[int, int]]:
    """Per attribute, the smallest interval [lo, hi) of positions holding the query's
    coverage there (attributes left whole by some box are omitted): a box around it."""
    parts = boxes_of(q)
    if not parts:
        return {}
    spans: dict[str, tuple[int, int]] | None = None
    for b in parts:
        mine = {p.attribute.name: (p.coverage[0][0], p.coverage[-1][1]) for p in b.predicates}
        if spans is None:
            spans = mine
        else:
            spans = {
                n: (min(lo, mine[n][0]), max(hi, mine[n][1]))
                for n, (lo, hi) in spans.items()
                if n in mine
            }
    return spans or {}
