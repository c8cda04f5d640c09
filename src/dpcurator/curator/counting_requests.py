"""Counts, histograms, marginals and sums, validated and priced before anything is
charged (a mixin of :class:`~dpcurator.curator.curator.Curator`).

A :class:`Prepared` request is everything the release needs and nothing it may not
know: the points it covers (what the filter charges), its cells and their labels (what
is counted), its cost and the sensitivity its noise is calibrated to. Preparing reads
the public schema and the request only, never data, and raises every error a request
can have, so a request that reaches the charge is complete (Dwork & Roth 2014,
Lemma 2.6: a refusal then depends on public things only).
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpcurator import deadlines
from dpcurator.curator import requests
from dpcurator.curator.budget import Budget, Cost
from dpcurator.errors import InvalidParameter, QueryError, TooLarge
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery, intersection
from dpcurator.queries.histogram import grid_text
from dpcurator.queries.parts import GroupTerm, group_term, table_cell
from dpcurator.queries.predicates import Predicate
from dpcurator.queries.values import decimal_text


def _edge(attr: Any, x: Fraction) -> str:
    """A bin edge as a request's text writes it (a number, or a quoted time)."""
    text = grid_text(attr, x)
    return text if attr.numeric else f"'{text}'"


def _cells(
    base: Query | BooleanQuery,
    boxes: Iterable[dict[str, tuple]],
    names: Iterable[str] | None = None,
) -> tuple[tuple[Query | BooleanQuery, ...], tuple[str, ...]]:
    """The cells of a histogram or marginal (each box within C_base) and their labels
    (``names``, or each box's own text): one query built per cell when ``base`` covers
    everything."""
    cells, labels = [], []
    everything = isinstance(base, Query) and not base.predicates
    given = iter(names) if names is not None else None
    for n, box in enumerate(boxes):
        if n % 1024 == 0:
            deadlines.check()
        label = next(given) if given is not None else None
        if any(not c for c in box.values()):  # parts that never meet (day 31 of February)
            attr = base.schema.attribute(next(iter(box)))
            cell = Query(base.schema, (Predicate(attr, ()),), label or "")
        else:
            cell = Query.from_coverages(base.schema, box, label or "")
        labels.append(cell.text)
        cells.append(cell if everything else intersection(base, cell, text=""))
    return tuple(cells), tuple(labels)


def _table_cells(terms: Sequence[GroupTerm]) -> Iterator[tuple[dict[str, tuple], str]]:
    """Every cell of a table over group terms, in :func:`itertools.product` order."""
    for combo in itertools.product(*(range(t.groups) for t in terms)):
        yield table_cell(terms, combo)


@dataclass(frozen=True)
class Prepared:
    """A request validated and priced, not yet charged: the points it covers, the cells
    it releases (with their labels), and its cost and sensitivity."""

    table: str
    covered: Query
    cells: tuple[Query, ...]
    labels: tuple[str, ...]
    kind: str
    request: str
    cost: Cost
    sensitivity: int
    attribute: str = ""  # sums: the summed attribute and its clip bounds (in units)
    lower: int = 0
    upper: int = 0
    #: What a sum's bounds, sensitivity and noise are counted in (1, or a float's step
    #: or a power of ten below it); its answer is scaled back to the attribute's units.
    unit: Fraction = Fraction(1)


class CountingRequests:
    """Preparing counts, histograms, marginals and sums; the attributes used are the
    curator's."""

    budget: Budget
    limits: requests.RequestLimits
    _table: Callable[[object], str]
    _schema: Callable[[str], Schema]

    def _prepare(self, kind: object, args: Mapping[str, Any]) -> Prepared:
        """Validate a request given as its kind and keyword arguments (as the HTTP
        service receives it) into a :class:`Prepared` request."""
        makers = {
            "count": self._prepare_count,
            "histogram": self._prepare_histogram,
            "marginal": self._prepare_marginal,
            "sum": self._prepare_sum,
        }
        if not isinstance(kind, str) or kind not in makers:
            raise InvalidParameter(f"kind must be one of {', '.join(makers)}, got {kind!r}")
        make = makers[kind]
        try:
            inspect.signature(make).bind(**args)
        except TypeError as err:  # an unknown or missing keyword
            raise InvalidParameter(f"{kind}: {err}") from None
        return make(**args)

    def _prepare_count(
        self,
        query: str | Query | None = None,
        *,
        epsilon: object = None,
        rho: object = None,
        mu: object = None,
        table: str | None = None,
    ) -> Prepared:
        t = self._table(table)
        q = requests.canonical_query(query, self._schema(t))
        cost = self.budget.cost(epsilon, rho, mu)
        text = q.text or "total"
        return Prepared(t, q, (q,), (text,), "count", text, cost, 1)

    def _prepare_histogram(
        self,
        attribute: str,
        bins: Sequence[int] | None = None,
        *,
        where: str | Query | None = None,
        epsilon: object = None,
        rho: object = None,
        mu: object = None,
        table: str | None = None,
    ) -> Prepared:
        t = self._table(table)
        schema = self._schema(t)
        term = group_term(schema, requests.term_text(attribute), "histogram")
        attr = term.attribute
        base = requests.canonical_query(where, schema)
        cost = self.budget.cost(epsilon, rho, mu)
        # the cells cover the whole domain (queries.histogram): the request covers `base`
        cap, limit = self.limits.cell_cap
        tail = f" where {base.text}" if where is not None else ""
        if term.part is not None:  # a cell per value of the part
            if bins is not None:
                raise QueryError(f"bins do not apply to {term.text}: its cells are its values")
            if term.groups > cap:
                raise TooLarge(
                    f"a histogram of {term.groups} cells exceeds the limit {limit} = {cap}"
                )
            boxes, names = zip(*_table_cells([term]), strict=True)
            cells, labels = _cells(base, boxes, names)
            request = f"histogram({term.text}){tail}"
            return Prepared(t, base, cells, labels, "histogram", request, cost, 1)
        covs = requests.histogram_bins(attr, bins, cap, f"{limit} = {cap}")
        request = f"histogram({attr.name})"
        if bins is not None:  # the edges as charged: clamped to the domain
            ends = [c[0] for c in covs if c[0][0] < attr.value_count]
            starts = [s for s, _ in ends] + [ends[-1][1]]
            edges = [_edge(attr, attr.number(p)) for p in starts]
            request = f"histogram({attr.name}, bins=[{', '.join(edges)}])"
        request += tail
        cells, labels = _cells(base, ({attr.name: c} for c in covs))
        return Prepared(t, base, cells, labels, "histogram", request, cost, 1)

    def _prepare_marginal(
        self,
        attributes: Sequence[str],
        *,
        where: str | Query | None = None,
        epsilon: object = None,
        rho: object = None,
        mu: object = None,
        table: str | None = None,
    ) -> Prepared:
        t = self._table(table)
        schema = self._schema(t)
        if isinstance(attributes, str):
            raise QueryError("marginal needs a list of attribute names, not one string")
        names = requests.bounded_list(attributes, 2 * len(schema), "attributes")
        if not names:
            raise QueryError("marginal needs a non-empty list of attribute names")
        terms = [group_term(schema, requests.term_text(a), "marginal") for a in names]
        names = [t.text for t in terms]
        if len(set(names)) != len(names):
            raise QueryError(f"repeated attribute in marginal {names}")
        base = requests.canonical_query(where, schema)
        cost = self.budget.cost(epsilon, rho, mu)
        n = math.prod(t.groups for t in terms)
        cap, limit = self.limits.cell_cap
        if n > cap:
            raise TooLarge(f"a marginal of {n} cells exceeds the limit {limit} = {cap}")
        if any(t.part is not None for t in terms):
            boxes, texts = zip(*_table_cells(terms), strict=True)
            cells, labels = _cells(base, boxes, texts)
        else:
            attrs = [t.attribute for t in terms]
            cells, labels = _cells(
                base,
                (
                    {a.name: ((i, i + 1),) for a, i in zip(attrs, combo, strict=True)}
                    for combo in itertools.product(*(range(a.size) for a in attrs))
                ),
            )
        request = f"marginal({', '.join(names)})" + (
            f" where {base.text}" if where is not None else ""
        )
        return Prepared(t, base, cells, labels, "marginal", request, cost, 1)

    def _prepare_sum(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: str | Query | None = None,
        *,
        epsilon: object = None,
        rho: object = None,
        mu: object = None,
        table: str | None = None,
    ) -> Prepared:
        t = self._table(table)
        schema = self._schema(t)
        name = requests.attribute_name(attribute, schema)
        attr = schema.attribute(name)
        if not attr.numeric:
            raise QueryError(f"sum needs an integer or float attribute; {name!r} is {attr.type}")
        lo, hi = requests.clip_bounds(lower, upper)
        unit = requests.value_unit(attr, lo, hi)
        low, high = int(lo / unit), int(hi / unit)  # whole numbers of units
        base = requests.canonical_query(where, schema)
        cost = self.budget.cost(epsilon, rho, mu)
        request = f"sum({name}, {decimal_text(lo)}, {decimal_text(hi)})" + (
            f" where {base.text}" if where is not None else ""
        )
        return Prepared(
            t, base, (base,), (request,), "sum", request, cost, max(abs(low), abs(high)),
            name, low, high, unit,
        )  # fmt: skip
