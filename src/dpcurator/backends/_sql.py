"""SQL text helpers: quoted identifiers and parameterised predicates.

Values never enter SQL text: every value travels as a ``?`` parameter. Identifiers are
double-quoted with embedded quotes doubled. :func:`coverage_parts` is the engine-free
shape of a predicate on a code column, shared with backends that build expressions
instead of SQL text.
"""

from __future__ import annotations

from dpcurator.queries.predicates import IntervalSet, complement, measure


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def coverage_parts(
    cov: IntervalSet, size: int
) -> tuple[bool, list[int], list[tuple[int, int]]] | bool:
    """How to test ``code in cov`` for a code column (codes are never NULL).

    ``False`` / ``True`` when the coverage is empty / the whole domain; else ``(negate,
    singles, ranges)``: the code is one of ``singles`` or in an inclusive ``(first,
    last)`` range, negated when the complement is the shorter test.
    """
    if not cov:
        return False
    if cov == ((0, size),):
        return True
    negate = False
    comp = complement(cov, size)
    if len(comp) < len(cov) or (len(comp) == len(cov) and measure(comp) < measure(cov)):
        cov, negate = comp, True
    singles = [s for s, e in cov if e - s == 1]
    ranges = [(s, e - 1) for s, e in cov if e - s > 1]
    return negate, singles, ranges


def coverage_sql(column: str, cov: IntervalSet, size: int) -> tuple[str, list[int]]:
    """A predicate on a code column (codes are never NULL) and its parameters."""
    shape = coverage_parts(cov, size)
    if shape is False:
        return "FALSE", []
    if shape is True:
        return "TRUE", []
    negate, singles, ranges = shape
    col = ident(column)
    parts: list[str] = []
    params: list[int] = []
    if len(singles) == 1:
        parts.append(f"{col} = ?")
        params.append(singles[0])
    elif singles:
        parts.append(f"{col} IN ({', '.join('?' * len(singles))})")
        params.extend(singles)
    for first, last in ranges:
        parts.append(f"{col} BETWEEN ? AND ?")
        params.extend((first, last))
    text = parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
    return (f"NOT {text}" if negate else text), params
