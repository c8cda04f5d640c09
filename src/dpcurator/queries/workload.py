"""The workload format: one entry per line (a query, a histogram or marginal macro, a
statistic line), or a JSON array, each with an optional weight.

It sits above both the query language (:mod:`dpcurator.queries.parser`) and the
statistic lines (:mod:`dpcurator.queries.statistics`), which it dispatches to.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpcurator.errors import QueryError, TooLarge, WorkloadError
from dpcurator.queries.boolean import BooleanQuery, intersection
from dpcurator.queries.histogram import cell_count, histogram_cells
from dpcurator.queries.parser import parse_query
from dpcurator.queries.parts import GroupTerm, group_term, table_cell
from dpcurator.queries.predicates import Predicate, Query
from dpcurator.queries.schema import Attribute, Schema
from dpcurator.queries.statistics import (
    STATISTIC_LINE,
    StatisticSpec,
    parse_statistic,
    split_arguments,
)
from dpcurator.queries.values import parse_number

#: A workload may expand (histograms, marginals) to at most this many queries.
MAX_QUERIES = 2_000_000


@dataclass(frozen=True)
class Workload:
    """Queries with their weights, in file order; each query keeps its source line.

    ``statistics``: empty when every line counts; else one entry per query, the
    :class:`~dpcurator.queries.statistics.StatisticSpec` of a statistic line (whose query
    is the points it reads) or None for a count."""

    queries: tuple[Query | BooleanQuery, ...]
    weights: tuple[float, ...]
    source: str = "<workload>"
    statistics: tuple[StatisticSpec | None, ...] = ()

    def __len__(self) -> int:
        return len(self.queries)

    def __iter__(self) -> Iterator[Query | BooleanQuery]:
        return iter(self.queries)

    def __getitem__(self, i: int) -> Query | BooleanQuery:
        return self.queries[i]

    @property
    def total_weight(self) -> float:
        """What sequential composition charges: the sum of the weights."""
        return math.fsum(self.weights)


def _outside_quotes(text: str, char: str) -> list[int]:
    """Positions of ``char`` outside single-quoted strings."""
    if char not in text:
        return []
    out, quoted = [], False
    for i, c in enumerate(text):
        if c == "'":
            quoted = not quoted
        elif c == char and not quoted:
            out.append(i)
    return out


_MACRO = re.compile(r"^(histogram|marginal)\s*\((.*)\)\s*$", re.IGNORECASE | re.DOTALL)
_BINS = re.compile(r"^bins\s*=\s*\[(.*)\]$", re.IGNORECASE | re.DOTALL)
_WHERE = re.compile(r"^where\s*=(?!=)(.*)$", re.IGNORECASE | re.DOTALL)


def _expand(
    body: str, schema: Schema, line: int, offset: int, room: int = MAX_QUERIES
) -> Sequence[Query | BooleanQuery]:
    """One workload entry -> its queries (a macro expands to many, at most ``room``,
    counted before they are built)."""
    if body.lower() == "total":
        return [Query(schema, (), "total", line)]
    m = _MACRO.match(body)
    if m is None:
        return [parse_query(body, schema, line=line, _offset=offset)]
    kind = m.group(1).lower()
    inner, where = _macro_where(m.group(2).strip(), kind)
    cells = _macro_cells(kind, inner, schema, line, room)
    if where is None:
        return cells
    # every cell restricted to the rows where= covers: still disjoint, so the macro is
    # still charged once on the points it covers (Smith et al. 2022, Thm 5)
    wq = parse_query(where, schema, line=line)
    return [
        intersection(q, wq, text=wq.text if q.text == "total" else f"{q.text} AND ({wq.text})")
        for q in cells
    ]


def _macro_where(inner: str, kind: str) -> tuple[str, str | None]:
    """A macro's arguments without its ``where=`` (its last argument, if any), and the
    condition."""
    parts = split_arguments(inner)
    keyed = [i for i, part in enumerate(parts) if _WHERE.match(part)]
    if not keyed:
        return inner, None
    if keyed != [len(parts) - 1]:
        raise QueryError(f"{kind}: where= must be given once, as the last argument")
    where = _WHERE.match(parts[-1]).group(1).strip()  # type: ignore[union-attr]
    if not where:
        raise QueryError("where= needs a condition")
    return ", ".join(parts[:-1]), where


def _macro_cells(
    kind: str, inner: str, schema: Schema, line: int, room: int
) -> Sequence[Query | BooleanQuery]:
    """The cells of ``histogram(...)`` or ``marginal(...)`` (without ``where=``)."""
    if kind == "histogram":
        parts = split_arguments(inner)
        if not parts or not parts[0]:
            raise QueryError("histogram needs an attribute: histogram(attr)")
        if len(parts) > 2:
            raise QueryError(
                "histogram takes histogram(attr) or histogram(attr, bins=[...]), "
                "optionally ending in where=..."
            )
        term = group_term(schema, _unquoted(parts[0]), "histogram")
        edges: list[object] | None = None
        if len(parts) == 2:
            bb = _BINS.match(parts[1].strip())
            if bb is None:
                raise QueryError(
                    "histogram takes histogram(attr) or histogram(attr, bins=[...]), "
                    "optionally ending in where=..."
                )
            if term.part is not None:
                raise QueryError(f"bins do not apply to {term.text}: its cells are its values")
            edges = [_edge_text(x) for x in split_arguments(bb.group(1)) if x.strip()]
        attr = term.attribute
        bins = term.groups if edges is None else cell_count(attr, edges)
        if bins > room:
            raise TooLarge(
                f"histogram({term.text}) would have {bins} bins; the workload may hold {room} more "
                "queries"
            )
        if term.part is not None:
            return [_cell(schema, [term], [g], line) for g in range(term.groups)]
        out = []
        for cov in histogram_cells(attr, edges):
            if cov == ((0, attr.size),):  # a one-value domain: the whole table
                out.append(Query(schema, (), "total", line))
            else:
                pred = Predicate(attr, cov)
                out.append(Query(schema, (pred,), pred.to_text(), line))
        return out
    names = [_unquoted(n) for n in split_arguments(inner)]
    if not names or any(not n for n in names):
        raise QueryError("marginal needs attributes: marginal(a1, a2, ...[, where=...])")
    terms = [group_term(schema, n, "marginal") for n in names]
    if len({t.text for t in terms}) != len(terms):
        raise QueryError("marginal attributes must be distinct")
    cells = math.prod(t.groups for t in terms)
    if cells > room:
        raise TooLarge(
            f"marginal({', '.join(t.text for t in terms)}) would have {cells} cells; the "
            f"workload may hold {room} more queries"
        )
    if any(t.part is not None for t in terms):
        return [
            _cell(schema, terms, list(combo), line)
            for combo in itertools.product(*(range(t.groups) for t in terms))
        ]
    # Build the cells directly from per-value predicates (no text parsing, no
    # normalisation): each predicate and its text is made once per value, and a cell
    # is a tuple of them in schema order.
    # cells vary like itertools.product over the attributes as written; predicates
    # are kept in schema order
    attrs = [t.attribute for t in terms]
    order = sorted(range(len(attrs)), key=lambda i: schema.index(attrs[i].name))
    per_attr = [[_value_predicate(a, p) for p in range(a.size)] for a in attrs]
    out = []
    for cell in itertools.product(*per_attr):
        chosen = [cell[i] for i in order]
        cell_preds = tuple(p for p, _ in chosen if p is not None)
        text = " AND ".join(t for _, t in chosen if t) or "total"
        out.append(Query(schema, cell_preds, text, line))
    return out


def _unquoted(text: str) -> str:
    """A macro's attribute argument: a double-quoted name unquoted (``""`` a quote)."""
    name = text.strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].replace('""', '"')
    return name


def _edge_text(text: str) -> object:
    """A bin edge as written in a workload line: a number, or quoted text (a time)."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] == "'":
        return t[1:-1].replace("''", "'")
    x = parse_number(t)
    if x is None:
        raise QueryError(f"a bin edge is a number or a quoted time, got {t!r}")
    return x


def _cell(schema: Schema, terms: Sequence[GroupTerm], groups: Sequence[int], line: int) -> Query:
    """The cell of a table over group terms (parts of times among them), labelled by its
    groups; an empty cell where two parts never meet."""
    covs, text = table_cell(terms, groups)
    if any(not c for c in covs.values()):
        return Query(schema, (Predicate(schema.attribute(next(iter(covs))), ()),), text, line)
    return Query.from_coverages(schema, covs, text, line)


def _entry(
    body: str, schema: Schema, line: int, offset: int, room: int
) -> tuple[Sequence[Query | BooleanQuery], StatisticSpec | None]:
    """One workload entry: its queries, and its statistic if it is a statistic line (one
    query: the points it reads, with the line's text)."""
    m = STATISTIC_LINE.match(body)
    if m is None:
        return _expand(body, schema, line, offset, room), None
    if room < 1:
        raise TooLarge(f"a statistic is one more query; the workload may hold {room} more")
    spec, q = parse_statistic(m.group(1), m.group(2), schema, line, body)
    return [q], spec


def _value_predicate(attr: Attribute, pos: int) -> tuple[Predicate | None, str]:
    """The predicate ``attr = value`` and its canonical text (None for a tautology)."""
    cov = ((pos, pos + 1),)
    if cov == ((0, attr.size),):
        return None, ""
    pred = Predicate(attr, cov)
    return pred, pred.to_text()


def _json_entries(text: str, name: str) -> list[tuple[int, str, object]]:
    """Elements of a JSON array with the line each starts on."""
    dec = json.JSONDecoder()
    pos = text.index("[") + 1
    out: list[tuple[int, str, object]] = []

    def skip(p: int) -> int:
        while p < len(text) and text[p].isspace():
            p += 1
        return p

    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        return out
    while True:
        line = text.count("\n", 0, pos) + 1
        try:
            value, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise WorkloadError(f"{name}:{err.lineno}: invalid JSON: {err.msg}") from None
        out.append((line, text[pos:end], value))
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            if text[pos + 1 :].strip():
                lineno = text.count("\n", 0, pos) + 1
                raise WorkloadError(f"{name}:{lineno}: invalid JSON: extra data after ']'")
            return out
        lineno = text.count("\n", 0, pos) + 1
        raise WorkloadError(f"{name}:{lineno}: invalid JSON: expected ',' or ']'")


#: The range of a workload line's weight: relative importance, so a ratio of 10^12 is
#: already far beyond any use (and the allocations' arithmetic stays finite).
WEIGHT_RANGE = (1e-6, 1e6)


def _weight(text: str) -> float:
    try:
        w = float(text)
    except ValueError:
        raise QueryError(f"weight must be a positive number, got {text.strip()!r}") from None
    if not math.isfinite(w) or w <= 0:
        raise QueryError(f"weight must be a positive number, got {text.strip()!r}")
    lo, hi = WEIGHT_RANGE
    if not lo <= w <= hi:
        raise QueryError(f"weight must be between {lo:g} and {hi:g}, got {text.strip()!r}")
    return w


def parse_workload(source: str | Path, schema: Schema) -> Workload:
    """Parse a workload from a path or from text (errors: ``file:line: message``).

    A :class:`~pathlib.Path`, or a one-line string naming an existing file, is read as a
    file; any other string is workload text. Text format: one entry per line (a query,
    ``total``, ``histogram(attr)``, ``histogram(attr, bins=[a, b, ...])``,
    ``marginal(a1, a2, ...)``, or a statistic: ``mean(attr, lower, upper, ...)``,
    ``variance``, ``stdev``, ``quantile(attr, q, ...)``, ``quantiles(attr, [q, ...], ...)``
    or ``median(attr, ...)``, see :mod:`dpcurator.queries.statistics`), optionally ending
    in ``@ weight``; blank lines and
    ``#`` comments are ignored. Text starting with ``[`` is JSON:
    ``[{"query": "...", "weight": 0.5}, "...", ...]``.
    """
    if isinstance(source, Path) or ("\n" not in source and Path(source).is_file()):
        name = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as err:
            raise WorkloadError(f"{name}: cannot read workload: {err.strerror or err}") from None
        except UnicodeDecodeError:
            raise WorkloadError(f"{name}: workload is not UTF-8 text") from None
    else:
        name, text = "<workload>", source
    return parse_workload_text(text, schema, name=name)


def parse_workload_text(
    text: str, schema: Schema, *, name: str = "<workload>", max_queries: int = MAX_QUERIES
) -> Workload:
    """Parse workload text (the format of :func:`parse_workload`), never reading a file:
    for text that comes from someone who must not name files on this machine. A workload
    may expand to at most ``max_queries`` queries; each line's expansion is counted
    before it is built, so an oversized request is refused at once."""
    if not isinstance(text, str):
        raise WorkloadError(f"{name}: a workload must be text, got {type(text).__name__}")
    queries: list[Query | BooleanQuery] = []
    weights: list[float] = []
    stats: list[StatisticSpec | None] = []

    def add(
        got: tuple[Sequence[Query | BooleanQuery], StatisticSpec | None], w: float, line: int
    ) -> None:
        qs, spec = got
        if len(queries) + len(qs) > max_queries:
            raise TooLarge(
                f"{name}:{line}: workload exceeds {max_queries} queries (the limit max_queries)"
            )
        queries.extend(qs)
        weights.extend([w] * len(qs))
        stats.extend([spec] * len(qs))

    def done() -> Workload:
        kept = tuple(stats) if any(s is not None for s in stats) else ()
        return Workload(tuple(queries), tuple(weights), name, kept)

    if text.lstrip().startswith("["):
        for line, _raw, value in _json_entries(text, name):
            try:
                if isinstance(value, str):
                    body, w = value, 1.0
                elif isinstance(value, dict) and isinstance(value.get("query"), str):
                    extra = set(value) - {"query", "weight"}
                    if extra:
                        raise QueryError(f"unknown key {sorted(extra)[0]!r}")
                    body = value["query"]
                    raw_w = value.get("weight", 1.0)
                    if isinstance(raw_w, bool) or not isinstance(raw_w, int | float):
                        raise QueryError(f"weight must be a positive number, got {raw_w!r}")
                    w = _weight(str(raw_w))
                else:
                    raise QueryError('an entry is a string or {"query": "...", "weight": w}')
                add(_entry(body.strip(), schema, line, 0, max_queries - len(queries)), w, line)
            except TooLarge as err:
                raise TooLarge(
                    f"{name}:{line}: {err}" if not str(err).startswith(name) else str(err)
                ) from None
            except QueryError as err:
                msg = re.sub(r"^column \d+: ", "", str(err))
                raise WorkloadError(f"{name}:{line}: {msg}") from None
        return done()

    for line, raw in enumerate(text.splitlines(), start=1):
        hashes = _outside_quotes(raw, "#")
        body = raw[: hashes[0]] if hashes else raw
        if not body.strip():
            continue
        try:
            if body.count("'") % 2:
                raise QueryError(f"column {body.index(chr(39)) + 1}: unterminated string")
            w = 1.0
            ats = _outside_quotes(body, "@")
            if ats:
                w = _weight(body[ats[-1] + 1 :])
                body = body[: ats[-1]]
            offset = len(body) - len(body.lstrip())
            room = max_queries - len(queries)
            add(_entry(body.strip(), schema, line, offset, room), w, line)
        except TooLarge as err:
            raise TooLarge(
                f"{name}:{line}: {err}" if not str(err).startswith(name) else str(err)
            ) from None
        except QueryError as err:
            raise WorkloadError(f"{name}:{line}: {err}") from None
    return done()
