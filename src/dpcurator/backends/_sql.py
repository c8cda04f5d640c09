"""SQL text helpers: quoted identifiers and parameterised predicates.

Values never enter SQL text: every value travels as a ``?`` parameter. Identifiers are
double-quoted with embedded quotes doubled.
"""

from __future__ import annotations

from dpcurator.queries.predicates import IntervalSet, complement, measure


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def coverage_sql(column: str, cov: IntervalSet, size: int) -> tuple[str, list[int]]:
    """A predicate on a code column (codes are never NULL) and its parameters."""
    if not cov:
        return "FALSE", []
    if cov == ((0, size),):
        return "TRUE", []
    negate = False
    comp = complement(cov, size)
    if len(comp) < len(cov) or (len(comp) == len(cov) and measure(comp) < measure(cov)):
        cov, negate = comp, True
    col = ident(column)
    singles = [s for s, e in cov if e - s == 1]
    parts: list[str] = []
    params: list[int] = []
    if len(singles) == 1:
        parts.append(f"{col} = ?")
        params.append(singles[0])
    elif singles:
        parts.append(f"{col} IN ({', '.join('?' * len(singles))})")
        params.extend(singles)
    for s, e in cov:
        if e - s > 1:
            parts.append(f"{col} BETWEEN ? AND ?")
            params.extend((s, e - 1))
    text = parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
    return (f"NOT {text}" if negate else text), params
