"""Unions of disjoint boxes: the coverage of any boolean predicate query.

A *box* is a conjunction of single-attribute predicates: the product of one value set
per attribute (attributes it does not mention carry their whole domain). Any boolean
combination of single-attribute predicates (AND, OR, NOT) covers a finite union of
boxes, and every such union can be rewritten as a union of pairwise *disjoint* boxes by
box subtraction: B \\ A splits B along each attribute A constrains, into at most one
piece per attribute. Disjointness is what keeps maximum overlap exact (Smith et al.,
PoPETs 2022, define it for any predicate): a point lies in at most one box of a query,
so giving every box its query's weight counts the query once wherever it applies.

Boxes here are plain mappings ``attribute name -> IntervalSet`` (non-empty coverages,
whole-domain coverages omitted); ``None`` stands for the empty box. Pure functions, no
data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dpcurator import deadlines
from dpcurator.errors import QueryError
from dpcurator.queries.predicates import IntervalSet, complement, intersect, union
from dpcurator.queries.schema import Schema

Box = dict[str, IntervalSet]

#: A query may cover at most this many disjoint boxes (its cost to check and count
#: grows with them); a larger one is refused with a message naming the limit.
MAX_BOXES = 1000


def full(schema: Schema, name: str) -> IntervalSet:
    return ((0, schema.attribute(name).size),)


def box_of(schema: Schema, coverages: Mapping[str, IntervalSet]) -> Box | None:
    """A box from coverages: whole-domain ones dropped; None if any is empty."""
    out: Box = {}
    for name, cov in coverages.items():
        if not cov:
            return None
        if cov != full(schema, name):
            out[name] = cov
    return out


def meet(a: Box, b: Box) -> Box | None:
    """a ∩ b, or None when they share no point."""
    out = dict(a)
    for name, cov in b.items():
        if name in out:
            both = intersect(out[name], cov)
            if not both:
                return None
            out[name] = both
        else:
            out[name] = cov
    return out


def subtract(b: Box, a: Box, schema: Schema) -> list[Box]:
    """b \\ a as disjoint boxes: peel off, attribute by attribute, the part of b outside
    a on that attribute, then keep only the part inside a for the next attribute."""
    if meet(a, b) is None:
        return [b]
    out: list[Box] = []
    rest = dict(b)
    for name, cov in a.items():
        mine = rest.get(name, full(schema, name))
        outside = intersect(mine, complement(cov, schema.attribute(name).size))
        if outside:
            piece = dict(rest)
            piece[name] = outside
            out.append(piece)
        inside = intersect(mine, cov)
        if inside == full(schema, name):
            rest.pop(name, None)
        else:
            rest[name] = inside
    return out


def _check(boxes: list[Box]) -> list[Box]:
    if len(boxes) > MAX_BOXES:
        raise QueryError(
            f"the query covers more than {MAX_BOXES} disjoint boxes of the domain; "
            "simplify it (fewer ORs of ranges on different attributes)"
        )
    return boxes


def disjoint_union(a: Sequence[Box], b: Sequence[Box], schema: Schema) -> list[Box]:
    """a ∪ b as disjoint boxes (a's boxes kept, b's reduced by them)."""
    out = list(a)
    for piece in b:
        deadlines.check()
        pieces = [piece]
        for held in a:
            pieces = [q for p in pieces for q in subtract(p, held, schema)]
            if not pieces:
                break
        out.extend(pieces)
        _check(out)
    return merge(out, schema)


def conjunction(a: Sequence[Box], b: Sequence[Box]) -> list[Box]:
    """a ∩ b: pairwise intersections (disjoint when a's and b's boxes are)."""
    out: list[Box] = []
    for x in a:
        deadlines.check()
        out.extend(m for y in b if (m := meet(x, y)) is not None)
        _check(out)
    return out


def negation(a: Sequence[Box], schema: Schema) -> list[Box]:
    """The complement of a union of boxes, as disjoint boxes."""
    if len(a) == 1 and len(a[0]) == 1:  # one attribute: its complement is one box
        ((name, cov),) = a[0].items()
        rest = complement(cov, schema.attribute(name).size)
        return [{name: rest}] if rest else []
    pieces: list[Box] = [{}]
    for held in a:
        deadlines.check()
        pieces = _check([q for p in pieces for q in subtract(p, held, schema)])
        if not pieces:
            break
    return merge(pieces, schema)


def merge(boxes: Iterable[Box], schema: Schema) -> list[Box]:
    """Join disjoint boxes that differ on one attribute only (their union is then one
    box), until none do: a union of ranges on one attribute stays one box.

    Two disjoint boxes that agree on every attribute but n both constrain n (were one of
    them whole on n, they would overlap), so grouping by "everything but n" finds them.
    """
    out: list[Box] = list(boxes)
    while len(out) > 1:
        deadlines.check()
        seen: dict[tuple, int] = {}
        pair = None
        for i, b in enumerate(out):
            for n in b:
                key = (n, tuple(sorted((m, c) for m, c in b.items() if m != n)))
                j = seen.setdefault(key, i)
                if j != i:
                    pair = (j, i, n)
                    break
            if pair:
                break
        if pair is None:
            break
        j, i, n = pair
        joined = {m: c for m, c in out[i].items() if m != n}
        cov = union(out[j][n], out[i][n])
        if cov != full(schema, n):
            joined[n] = cov
        out = [b for k, b in enumerate(out) if k not in (i, j)] + [joined]
    return out


def covers(box: Box, positions: Mapping[str, int]) -> bool:
    """Whether the point (attribute -> value position) lies in the box."""
    return all(any(s <= positions[n] < e for s, e in cov) for n, cov in box.items())
