"""Statistics in a workload: ``mean(...)``, ``variance(...)``, ``stdev(...)``,
``quantile(...)``, ``quantiles(...)``, ``median(...)`` and ``units(...)`` lines. Pure: text in, a checked
description and the points it reads out.

Forms (keyword arguments in any order, after the positional ones)::

    mean(income, 0, 200000, where=age < 30)         # also variance, stdev
    share(arr_delay > 15, by=origin)                # the fraction where it holds
    quantile(age, 0.9, by=sex)
    quantiles(hours-per-week, [0.25, 0.5, 0.75], by=[sex, race])
    median(age, where=sex = 'F', candidates=[20, 30, 40, 50, 60])
    units(origin = 'EWR')                           # distinct privacy units


A statistic line is one measurement: it reads the rows its ``where`` covers (without the
rows whose attribute is missing), and those are the points it is charged on, whatever
its groups (they are disjoint: parallel composition, Smith et al. 2022, Thm 5). The
planner gives it a cost as it would a count of that coverage with the line's weight.
A ``share(<condition>, ...)`` line reads every row its ``where`` covers (its condition
decides only the numerator). A ``units(<condition>)`` line (the number of privacy units with a kept row satisfying
the condition) is charged its planned cost on those points, and its noise, of
sensitivity 1, is calibrated to a k-th of it (for epsilon, the noise of a count of the
same cost; for rho and mu, additive in rho and mu^2, a sqrt(k)-th of a count's sigma).
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction

from dpcurator.errors import InvalidParameter, QueryError
from dpcurator.queries.boolean import BooleanQuery, intersection
from dpcurator.queries.parser import parse_query
from dpcurator.queries.parts import group_term
from dpcurator.queries.predicates import Query, complement
from dpcurator.queries.schema import Attribute, Schema
from dpcurator.queries.statistic_request import StatisticRequest
from dpcurator.queries.values import parse_number

__all__ = [
    "MAX_Q_DENOMINATOR",
    "STATISTIC_LINE",
    "StatisticSpec",
    "parse_statistic",
    "quantile_fraction",
    "statistic_coverage",
]

#: A statistic line: its kind and what is between its parentheses.
STATISTIC_LINE = re.compile(
    r"^(mean|variance|stdev|share|quantiles|quantile|median|units)\s*\((.*)\)\s*$",
    re.IGNORECASE | re.DOTALL,
)
#: A quantile q is read as its decimal, with at most six decimal places.
MAX_Q_DENOMINATOR = 10**6
_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)$")
_KEYWORDS = {"where", "by", "candidates"}


def quantile_fraction(q: object, name: str = "q") -> Fraction:
    """q in [0, 1] as the exact decimal it is written as (0.25 is 1/4), at most six
    decimal places (so that scores stay small integers)."""
    if isinstance(q, bool) or not isinstance(q, numbers.Real):
        raise InvalidParameter(f"{name} must be a number in [0, 1], got {q!r}")
    if isinstance(q, Fraction | numbers.Integral):  # numpy's integers too
        f = Fraction(q)
    else:  # a float as written: numpy's floats too (their repr is not a decimal)
        x = float(q)
        if not math.isfinite(x):
            raise InvalidParameter(f"{name} must be a number in [0, 1], got {q!r}")
        f = Fraction(repr(x))
    if not 0 <= f <= 1:
        raise InvalidParameter(f"{name} must be a number in [0, 1], got {q!r}")
    if MAX_Q_DENOMINATOR % f.denominator:
        raise InvalidParameter(f"{name} may have at most six decimal places, got {q!r}")
    return f


#: The workload's name for a statistic line's request (the same type).
StatisticSpec = StatisticRequest


def statistic_coverage(
    schema: Schema, attribute: str, where: Query | BooleanQuery, text: str | None = None
) -> Query | BooleanQuery:
    """The points a statistic of ``attribute`` over ``where`` reads: ``where``'s, less the
    attribute's missing-value marker (its rows are left out). ``text``: the result's text
    (None keeps ``where``'s; "" the canonical one)."""
    attr = schema.attribute(attribute)
    if attr.missing is None:
        if text is None:
            return where
        return intersection(where, Query(schema, ()), text=text)
    p = attr.position(attr.missing)
    present = Query.from_coverages(schema, {attribute: complement(((p, p + 1),), attr.size)})
    return intersection(where, present, text=text)


def split_arguments(text: str) -> list[str]:
    """Top-level comma-separated parts (commas inside quotes, brackets or parentheses
    stay)."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, c in enumerate(text):
        if c == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
            if depth < 0:
                raise QueryError(f"unbalanced {c!r}")
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if quoted:
        raise QueryError("unterminated string")
    if depth:
        raise QueryError("unbalanced brackets")
    parts.append(text[start:].strip())
    return parts


def _bracketed(text: str, what: str) -> list[str]:
    t = text.strip()
    if not (t.startswith("[") and t.endswith("]")):
        raise QueryError(f"{what} must be a bracketed list, e.g. [a, b]")
    inner = t[1:-1].strip()
    return split_arguments(inner) if inner else []


def _name(text: str, schema: Schema) -> str:
    name = text.strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = name[1:-1].replace('""', '"')
    if name not in schema:
        raise QueryError(f"unknown attribute {name!r}")
    return name


def _integer(text: str, what: str) -> int:
    if not _INT.match(text.strip()):
        raise QueryError(f"{what} must be an integer, got {text.strip()!r}")
    return int(text.strip())


def _bound(text: str, what: str) -> int | Fraction:
    """A clip bound as the exact decimal it is written as (an int when whole)."""
    x = parse_number(text.strip())
    if x is None:
        raise QueryError(f"{what} must be a number, got {text.strip()!r}")
    return int(x) if x.denominator == 1 else x


def _quantile(text: str) -> Fraction:
    t = text.strip()
    if not _NUMBER.match(t):
        raise QueryError(f"a quantile must be a number in [0, 1], got {t!r}")
    try:
        return quantile_fraction(Fraction(t))
    except InvalidParameter as err:
        raise QueryError(f"{err} ({t})") from None


def _candidate(text: str, attr: Attribute) -> int | float | str:
    t = text.strip()
    if attr.type == "integer":
        v = _integer(t, "a candidate")
        if not attr.min <= v <= attr.max:
            raise QueryError(f"candidate {v} is outside {attr.name!r}'s domain")
        return v
    if attr.type == "float":
        x = parse_number(t)
        if x is None:
            raise QueryError(f"a candidate of {attr.name!r} is a number, got {t!r}")
        try:
            return attr.value(attr.exact_position(x))  # type: ignore[return-value]
        except KeyError:
            raise QueryError(
                f"candidate {t} is not a value of {attr.name!r} {attr.describe()}"
            ) from None
    if len(t) < 2 or t[0] != "'" or t[-1] != "'":
        raise QueryError(f"a candidate of {attr.name!r} is a quoted value, got {t!r}")
    value = t[1:-1].replace("''", "'")
    try:
        return attr.value(attr.position(value))  # type: ignore[return-value]
    except KeyError:
        raise QueryError(f"candidate {value!r} is not a value of {attr.name!r}") from None


def parse_statistic(
    kind: str, inner: str, schema: Schema, line: int | None = None, text: str = ""
) -> tuple[StatisticSpec, Query | BooleanQuery]:
    """A statistic line (its kind and what is between its parentheses) checked against
    ``schema``, and the points it reads, as a query with ``text`` and ``line``."""
    kind = kind.lower()
    if kind == "units":  # units(<condition>): the whole inside is the condition
        where = inner.strip() or None
        base = parse_query(where, schema) if where is not None else Query(schema, ())
        unit_spec = StatisticSpec("units", "", where=where)
        return unit_spec, _at_line(_with_text(base, text), line)
    parts = split_arguments(inner)
    positional: list[str] = []
    keywords: dict[str, str] = {}
    for part in parts:
        m = re.match(r"^([A-Za-z_]+)\s*=(?!=)(.*)$", part, re.DOTALL)
        if m is not None and m.group(1).lower() in _KEYWORDS:
            key = m.group(1).lower()
            if key in keywords:
                raise QueryError(f"{key}= is given twice")
            keywords[key] = m.group(2).strip()
        elif keywords:
            raise QueryError(f"positional argument {part!r} after a keyword argument")
        elif not part:
            raise QueryError(f"{kind}: an empty argument")
        else:
            positional.append(part)
    if kind == "share":
        return _parse_share(positional, keywords, schema, line, text)
    want = {"mean": 3, "variance": 3, "stdev": 3, "quantile": 2, "quantiles": 2, "median": 1}[kind]
    usage = {
        3: f"{kind}(attribute, lower, upper[, by=..., where=...])",
        2: f"{kind}(attribute, {'q' if kind == 'quantile' else '[q, ...]'}[, by=..., where=..., candidates=[...]])",
        1: "median(attribute[, by=..., where=..., candidates=[...]])",
    }[want]
    if len(positional) != want:
        raise QueryError(f"{kind} takes {usage}")
    name = _name(positional[0], schema)
    attr = schema.attribute(name)
    lower = upper = None
    qs: tuple[Fraction, ...] = ()
    if want == 3:
        if "candidates" in keywords:
            raise QueryError(f"{kind} takes no candidates=")
        if not attr.numeric:
            raise QueryError(f"{kind} needs an integer or float attribute; {name!r} is {attr.type}")
        lower, upper = _bound(positional[1], "lower"), _bound(positional[2], "upper")
        if lower >= upper:
            raise QueryError(
                f"{kind} needs lower < upper, got [{positional[1].strip()}, {positional[2].strip()}]"
            )
    else:
        if not attr.ordered:
            raise QueryError(f"a quantile needs an ordered attribute; {name!r} is not ordered")
        if kind == "quantile":
            qs = (_quantile(positional[1]),)
        elif kind == "quantiles":
            qs = tuple(_quantile(x) for x in _bracketed(positional[1], "the quantiles"))
            if not qs:
                raise QueryError("quantiles needs at least one q")
        else:
            qs = (Fraction(1, 2),)
    by = _by(keywords, schema, name)
    candidates = None
    if "candidates" in keywords:
        candidates = tuple(
            _candidate(x, attr) for x in _bracketed(keywords["candidates"], "candidates")
        )
        if not candidates:
            raise QueryError("candidates= needs at least one value")
    where = keywords.get("where")
    if where is not None and not where:
        raise QueryError("where= needs a condition")
    base = parse_query(where, schema) if where is not None else Query(schema, ())
    spec = StatisticSpec(kind, name, lower, upper, qs, by, candidates, where)
    covered = statistic_coverage(schema, name, base, text)
    return spec, (covered if covered.line == line else _at_line(covered, line))


def _by(keywords: dict[str, str], schema: Schema, own: str) -> tuple[str, ...]:
    """A line's ``by=`` group terms (attributes, or parts of times such as
    ``month(time_hour)``; none of them the statistic's own attribute)."""
    if "by" not in keywords:
        return ()
    raw = keywords["by"]
    names = _bracketed(raw, "by") if raw.startswith("[") else [raw]
    terms = [group_term(schema, _unquoted(n)) for n in names]
    by = tuple(t.text if t.part is not None else t.attribute.name for t in terms)
    if not by or len(set(by)) != len(by) or own in by:
        raise QueryError("by= needs distinct attributes other than the statistic's own")
    return by


def _unquoted(text: str) -> str:
    name = text.strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].replace('""', '"')
    return name


def _parse_share(
    positional: list[str], keywords: dict[str, str], schema: Schema, line: int | None, text: str
) -> tuple[StatisticSpec, Query | BooleanQuery]:
    """``share(<condition>[, by=..., where=...])``: it reads every row ``where`` covers."""
    if len(positional) != 1:
        raise QueryError("share takes share(condition[, by=..., where=...])")
    if "candidates" in keywords:
        raise QueryError("share takes no candidates=")
    condition = positional[0]
    parse_query(condition, schema)  # checked now, with the line
    where = keywords.get("where")
    if where is not None and not where:
        raise QueryError("where= needs a condition")
    base = parse_query(where, schema) if where is not None else Query(schema, ())
    spec = StatisticSpec(
        "share", "", by=_by(keywords, schema, ""), where=where, condition=condition
    )
    return spec, _at_line(_with_text(base, text), line)


def _with_text(q: Query | BooleanQuery, text: str) -> Query | BooleanQuery:
    if isinstance(q, BooleanQuery):
        return BooleanQuery.from_boxes(q.schema, q.boxes, text=text, line=q.line)
    return Query(q.schema, q.predicates, text, q.line)


def _at_line(q: Query | BooleanQuery, line: int | None) -> Query | BooleanQuery:
    if isinstance(q, BooleanQuery):
        return BooleanQuery.from_boxes(q.schema, q.boxes, text=q.text, line=line)
    return Query(q.schema, q.predicates, q.text, line)
