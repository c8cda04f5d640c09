"""The query language (SQL's WHERE over single columns) and the workload format.

A query is any boolean combination (AND, OR, NOT, parentheses) of single-column
predicates; its coverage is a union of boxes, kept as disjoint boxes (see
:mod:`dpcurator.queries.boxes`), which is how maximum overlap is defined for any
predicate (Smith et al., PoPETs 2022). Range bounds outside an ordered domain are
clamped as SQL means them; a value given with ``=`` or ``IN`` must be in the domain, since
a value outside it is far more often a typo than an intent (``FALSE`` or ``IN ()`` say
"nothing" explicitly).
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

from dpcurator.errors import QueryError, TooLarge, WorkloadError
from dpcurator.queries import boxes as bx
from dpcurator.queries.boolean import BooleanQuery, intersection
from dpcurator.queries.boolean import make as make_query
from dpcurator.queries.histogram import cell_count, histogram_cells
from dpcurator.queries.parts import PARTS, GroupTerm, Part, group_term, part_of, table_cell
from dpcurator.queries.predicates import (
    KEYWORDS,
    IntervalSet,
    Predicate,
    Query,
    complement,
    normalize,
    render_name,
)
from dpcurator.queries.schema import Attribute, Schema
from dpcurator.queries.statistics import (
    STATISTIC_LINE,
    StatisticSpec,
    parse_statistic,
    split_arguments,
)
from dpcurator.queries.values import (
    number_of,
    parse_boolean,
    parse_date,
    parse_instant,
    parse_number,
)

#: A workload may expand (histograms, marginals) to at most this many queries.
MAX_QUERIES = 2_000_000
#: Parentheses (and NOTs) may nest this deep (deeper text is refused, not a stack overflow).
MAX_NESTING = 100
#: A number in query text has at most this many characters (Python reads at most 4,300
#: digits into an integer; no domain needs more than a few dozen).
MAX_DIGITS = 1000

#: One token after any whitespace, or the first character of something that is none
#: (``bad``). The alternatives begin with distinct characters, so their order does not
#: change what matches; the commonest come first.
_TOKEN = re.compile(
    r"""
    \s*(?:
    (?P<ident>[A-Za-z_][A-Za-z0-9_.\-]*)
  | (?P<string>'(?:[^']|'')*')
  | (?P<punct>[(),;])
  | (?P<op><=|>=|!=|<>|==|=|<|>)
  | (?P<number>-?\d+(?![\w.]))
  | (?P<decimal>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(?![\w.]))
  | (?P<qident>"(?:[^"]|"")+")
  | (?P<bad>\S)
    )
    """,
    re.VERBOSE,
)

_SUPPORTED = (
    "supported: comparisons (= == != <> < <= > >=) of a column with a value, "
    "[NOT] BETWEEN, [NOT] IN (...), IS [NOT] NULL, AND, OR, NOT, parentheses, TRUE, FALSE"
)
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!=", "<>": "<>"}


class _Tok(NamedTuple):
    """A token (a named tuple: a long batch makes hundreds of thousands of them)."""

    kind: str  # string, ident, qident, number, decimal, op, punct, kw, end
    text: str
    value: int | str | None
    col: int  # 1-based


def _tokenize(text: str, offset: int) -> list[_Tok]:
    toks: list[_Tok] = []
    append = toks.append
    # up to the trailing whitespace: there no alternative matches, and a search through
    # it would try the pattern at each of its positions (quadratic in its length)
    for m in _TOKEN.finditer(text, 0, len(text.rstrip())):
        kind = str(m.lastgroup)  # every match is one named alternative
        tok = m[kind]
        col = m.end() - len(tok) + 1 + offset
        if len(tok) > MAX_DIGITS and kind in ("number", "decimal"):
            raise QueryError(f"column {col}: a number of more than {MAX_DIGITS} digits")
        if kind == "ident":
            upper = tok.upper()
            if upper in KEYWORDS:
                append(_Tok("kw", upper, upper, col))
            else:
                append(_Tok("ident", tok, tok, col))
        elif kind == "string":
            append(_Tok("string", tok, tok[1:-1].replace("''", "'"), col))
        elif kind == "number":
            append(_Tok("number", tok, int(tok), col))
        elif kind == "op":
            append(_Tok("op", "=" if tok == "==" else tok, tok, col))
        elif kind == "qident":
            append(_Tok("qident", tok, tok[1:-1].replace('""', '"'), col))
        elif kind == "bad":
            if tok == "'":
                raise QueryError(f"column {col}: unterminated string")
            if tok == '"':
                raise QueryError(f"column {col}: unterminated quoted name")
            raise QueryError(f"column {col}: syntax error at {tok!r}")
        else:
            append(_Tok(kind, tok, tok, col))
    if toks and toks[-1].kind == "punct" and toks[-1].text == ";":
        toks.pop()  # a statement's closing semicolon
    toks.append(_Tok("end", "end of query", None, len(text) + 1 + offset))
    return toks


# An expression evaluates to a list of disjoint boxes (attribute -> coverage).
_Boxes = list[bx.Box]


def _same(value: Fraction | str | bool, missing: object) -> bool:
    """Whether a literal is the attribute's missing-value marker (text, or a number)."""
    if isinstance(value, Fraction):
        return number_of(missing) == value if not isinstance(missing, str) else False
    return type(value) is type(missing) and value == missing


@dataclass(frozen=True)
class _Term:
    """What a predicate constrains: a column, or a part of a time column."""

    attr: Attribute
    part: Part | None


def _suggest(word: str, choices: Sequence[str]) -> str:
    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not near:
        near = [c for c in choices if c.lower() == word.lower()][:1]
    return f"; did you mean {near[0]!r}?" if near else ""


class _Parser:
    """Recursive descent over the WHERE-clause grammar; every node is turned into
    disjoint boxes as soon as it is parsed (see :mod:`dpcurator.queries.boxes`)."""

    def __init__(self, text: str, schema: Schema, offset: int) -> None:
        self.schema = schema
        self.toks = _tokenize(text, offset)
        self.i = 0
        self.depth = 0

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def next(self) -> _Tok:
        """The next token; at the end, the end token again (never past it: text that
        stops early gets a syntax error, not an IndexError)."""
        tok = self.toks[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def fail(self, tok: _Tok, expected: str) -> QueryError:
        got = tok.text if tok.kind != "end" else "end of query"
        return QueryError(f"column {tok.col}: syntax error: expected {expected}, got {got!r}")

    def expect(self, kind: str, text: str, expected: str) -> _Tok:
        tok = self.next()
        if tok.kind != kind or tok.text != text:
            raise self.fail(tok, expected)
        return tok

    def deeper(self, tok: _Tok) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise QueryError(f"column {tok.col}: expression nested more than {MAX_NESTING} deep")

    def parse(self) -> _Boxes:
        if self.peek().kind == "end":
            raise self.fail(self.peek(), "a predicate")
        result = self.or_expr()
        tok = self.peek()
        if tok.kind != "end":
            if tok.kind == "kw" and tok.text == "LIKE":
                raise QueryError(
                    f"column {tok.col}: LIKE is not a predicate over single columns; {_SUPPORTED}"
                )
            raise self.fail(tok, "AND, OR or end of query")
        return result

    def or_expr(self) -> _Boxes:
        left = self.and_expr()
        while self.peek().kind == "kw" and self.peek().text == "OR":
            self.next()
            left = bx.disjoint_union(left, self.and_expr(), self.schema)
        return left

    def and_expr(self) -> _Boxes:
        result = self.not_expr()
        while self.peek().kind == "kw" and self.peek().text == "AND":
            self.next()
            result = bx.merge(bx.conjunction(result, self.not_expr()), self.schema)
        return result

    def not_expr(self) -> _Boxes:
        tok = self.peek()
        if tok.kind == "kw" and tok.text == "NOT":
            self.next()
            self.deeper(tok)
            inner = self.not_expr()
            self.depth -= 1
            return bx.negation(inner, self.schema)
        return self.primary()

    def primary(self) -> _Boxes:
        tok = self.peek()
        if tok.kind == "punct" and tok.text == "(":
            self.next()
            self.deeper(tok)
            if self.peek().kind == "ident" and self.peek().text.upper() == "SELECT":
                raise QueryError(
                    f"column {self.peek().col}: sub-queries are not predicates over single columns; {_SUPPORTED}"
                )
            inner = self.or_expr()
            self.expect("punct", ")", "')'")
            self.depth -= 1
            return inner
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE"):
            self.next()
            return [{}] if tok.text == "TRUE" else []
        after = self.peek(1)
        if (
            tok.kind == "ident"
            and tok.text.lower() == "total"
            and (after.kind == "end" or after.text in (")", "AND", "OR"))
        ):
            self.next()
            return [{}]
        return self.predicate()

    # --- one predicate ---------------------------------------------------------------

    def attribute(self, tok: _Tok) -> Attribute:
        """The attribute a name token names (case-insensitively when unambiguous)."""
        if tok.kind not in ("ident", "qident"):
            raise self.fail(tok, "a column name")
        name = str(tok.value)
        if name in self.schema:
            return self.schema.attribute(name)
        folded = self.schema.named_like(name)
        if len(folded) == 1:
            return self.schema.attribute(folded[0])
        if len(folded) > 1:
            raise QueryError(
                f"column {tok.col}: {name!r} matches several attributes "
                f"({', '.join(folded)}): write the name exactly"
            )
        raise QueryError(
            f"column {tok.col}: unknown attribute {name!r}{_suggest(name, self.schema.names)}"
        )

    def term(self, tok: _Tok) -> _Term:
        """A column, or a part of a time column (``month(time_hour)``)."""
        if tok.kind == "ident" and self.peek().kind == "punct" and self.peek().text == "(":
            if tok.text.lower() not in PARTS:
                raise QueryError(
                    f"column {tok.col}: {tok.text}(...) is a function; functions are not "
                    "predicates over single columns, but for the parts of a time "
                    f"({', '.join(f'{p}(t)' for p in PARTS)}); {_SUPPORTED}"
                )
            self.next()
            attr = self.attribute(self.next())
            self.expect("punct", ")", f"')' after {tok.text}({attr.name}")
            try:
                return _Term(attr, part_of(attr, tok.text))
            except QueryError as err:
                raise QueryError(f"column {tok.col}: {err}") from None
        return _Term(self.attribute(tok), None)

    def is_name(self, tok: _Tok) -> bool:
        return tok.kind in ("qident", "ident")

    def predicate(self) -> _Boxes:
        first = self.next()
        if first.kind in ("string", "number", "decimal"):
            # a literal first: `30 < age`
            op = self.next()
            if op.kind != "op":
                raise self.fail(op, "a comparison after the value")
            term = self.term(self.next())
            return self.compare(term, _FLIP[op.text], first, op)
        if first.kind == "kw" and first.text == "NOT":
            raise self.fail(first, "a predicate")
        if not self.is_name(first):
            raise self.fail(first, "a column name, a value, NOT or '('")
        term = self.term(first)
        op = self.peek()
        if (
            term.attr.type == "boolean"
            and term.part is None
            and (
                op.kind == "end"
                or (op.kind == "punct" and op.text == ")")
                or (op.kind == "kw" and op.text in ("AND", "OR"))
            )
        ):  # a boolean column alone: `cancelled` is `cancelled = TRUE`
            return self.single(term.attr, ((1, 2),))
        op = self.next()
        negate = False
        if op.kind == "kw" and op.text == "NOT":
            negate = True
            op = self.next()
            if not (op.kind == "kw" and op.text in ("IN", "BETWEEN", "LIKE")):
                raise self.fail(op, "IN or BETWEEN after NOT")
        if op.kind == "op":
            value = self.next()
            if self.is_name(value) and value.kind == "ident":
                raise QueryError(
                    f"column {value.col}: comparing two columns is not a predicate over single "
                    f"columns (quote text values: '{value.text}'); {_SUPPORTED}"
                )
            return self.compare(term, op.text, value, op)
        if op.kind == "kw" and op.text == "LIKE":
            raise QueryError(
                f"column {op.col}: LIKE is not a predicate over single columns; {_SUPPORTED}"
            )
        attr = term.attr
        if op.kind == "kw" and op.text == "IS":
            neg = False
            if self.peek().kind == "kw" and self.peek().text == "NOT":
                self.next()
                neg = True
            self.expect("kw", "NULL", "NULL after IS [NOT]")
            pos = attr.missing_position
            if pos is None:
                raise QueryError(
                    f"column {op.col}: attribute {attr.name!r} may not be missing, so IS NULL "
                    'means nothing here (a schema says it may with "missing": a value)'
                )
            cov: IntervalSet = ((pos, pos + 1),)
            if neg:
                cov = complement(cov, attr.size)
            return self.single(attr, cov)
        if op.kind == "kw" and op.text == "IN":
            self.expect("punct", "(", "'(' after IN")
            members: list[int] = []  # each value checked as it is read
            if self.peek().kind == "punct" and self.peek().text == ")":
                self.next()
            else:
                while True:
                    members.append(self.member(term, self.next()))
                    sep = self.next()
                    if sep.kind == "punct" and sep.text == ")":
                        break
                    if not (sep.kind == "punct" and sep.text == ","):
                        raise self.fail(sep, "',' or ')'")
            cov = self.coverage_of(term, members)
        elif op.kind == "kw" and op.text == "BETWEEN":
            self.require_ordered(term, op)
            low = self.next()
            if low.kind == "end":
                raise self.fail(low, "a value after BETWEEN")
            self.expect("kw", "AND", "AND in BETWEEN")
            cov = self.value_range(term, (low, False), (self.next(), True))
        else:
            raise self.fail(op, "a comparison, IN, BETWEEN or IS NULL")
        if negate:
            cov = complement(cov, attr.size)
        return self.single(attr, cov)

    def single(self, attr: Attribute, cov: IntervalSet) -> _Boxes:
        box = bx.box_of(self.schema, {attr.name: normalize(cov)})
        return [] if box is None else [box]

    def compare(self, term: _Term, op: str, value: _Tok, at: _Tok) -> _Boxes:
        attr = term.attr
        if op in ("=", "!=", "<>"):
            cov = self.coverage_of(term, [self.member(term, value)])
            return self.single(attr, cov if op == "=" else complement(cov, attr.size))
        self.require_ordered(term, at)
        if op == "<":
            cov = self.value_range(term, None, (value, False), open_high=True)
        elif op == "<=":
            cov = self.value_range(term, None, (value, True))
        elif op == ">":
            cov = self.value_range(term, (value, True), None, open_low=True)
        else:
            cov = self.value_range(term, (value, False), None)
        return self.single(attr, cov)

    def member(self, term: _Term, tok: _Tok) -> int:
        """A value of ``=`` / ``IN``, which must be in the domain (a typo must not
        silently spend budget on nothing): its position, or a part's value."""
        if term.part is not None:
            return self.part_value(term.part, tok)
        return self.exact_value(term.attr, tok)

    def coverage_of(self, term: _Term, members: Sequence[int]) -> IntervalSet:
        """The positions of the values :meth:`member` read."""
        if term.part is not None:
            return term.part.coverage(members)
        return normalize((p, p + 1) for p in members)

    def value_range(
        self,
        term: _Term,
        low: tuple[_Tok, bool] | None,
        high: tuple[_Tok, bool] | None,
        *,
        open_low: bool = False,
        open_high: bool = False,
    ) -> IntervalSet:
        """The positions from ``low`` to ``high`` (either None: unbounded), each a value
        token and whether it is the bound's upper side; bounds outside the domain are
        clamped, as SQL means them. A range never holds the missing value's own cell."""
        if term.part is not None:
            part = term.part
            a, b = part.lo, part.hi
            if low is not None:
                x = self.part_number(part, low[0])
                a = max(a, math.floor(x) + 1 if open_low else math.ceil(x))
            if high is not None:
                x = self.part_number(part, high[0])
                b = min(b, math.ceil(x) - 1 if open_high else math.floor(x))
            return part.value_range(a, b) if a <= b else ()
        attr = term.attr
        start = 0 if low is None else self.bound(attr, low[0], up=low[1])
        end = attr.value_count if high is None else self.bound(attr, high[0], up=high[1])
        return normalize([(start, end)])

    def part_number(self, part: Part, tok: _Tok) -> Fraction:
        if tok.kind not in ("number", "decimal"):
            if tok.kind in ("string", "qident", "kw"):
                raise QueryError(
                    f"column {tok.col}: {part.text} is a number ({part.lo} to {part.hi}), "
                    f"got {tok.text}"
                )
            raise self.fail(tok, "a value")
        x = parse_number(tok.text)
        assert x is not None
        return x

    def part_value(self, part: Part, tok: _Tok) -> int:
        x = self.part_number(part, tok)
        if x.denominator != 1 or not part.lo <= x <= part.hi:
            raise QueryError(
                f"column {tok.col}: {tok.text} is not a value of {part.text} "
                f"({part.lo} to {part.hi})"
            )
        return int(x)

    def literal(self, attr: Attribute, tok: _Tok) -> Fraction | str | bool:
        """A value token read as ``attr``'s values are: a grid type's number (an exact
        decimal; a timestamp's seconds or a date's days since 1970-01-01), a
        categorical's text, a boolean."""
        if tok.kind == "qident":
            raise QueryError(
                f"column {tok.col}: use single quotes for values: '{tok.value}' "
                "(double quotes are for column names)"
            )
        t = attr.type
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE"):
            if t == "boolean":
                return tok.text == "TRUE"
            raise QueryError(f"column {tok.col}: attribute {attr.name!r} is {t}, got {tok.text}")
        if tok.kind not in ("string", "number", "decimal"):
            raise self.fail(tok, "a value")
        text = str(tok.value)
        if t == "categorical":
            if tok.kind != "string":
                raise QueryError(
                    f"column {tok.col}: attribute {attr.name!r} is categorical, "
                    f"got number {tok.text} (quote it: '{tok.text}')"
                )
            return text
        if t == "boolean":
            b = parse_boolean(text) if tok.kind == "string" else None
            if b is None or text.lower() not in ("true", "false"):
                raise QueryError(
                    f"column {tok.col}: attribute {attr.name!r} is boolean: write TRUE or "
                    f"FALSE, got {tok.text}"
                )
            return b
        if t in ("integer", "float"):
            if tok.kind == "string":
                raise QueryError(
                    f"column {tok.col}: attribute {attr.name!r} is {t}, got string {tok.text}"
                )
            if tok.kind == "number" and t == "integer":  # the common case, kept an int
                return Fraction(int(str(tok.value)))
            x = parse_number(tok.text)
            if x is None:
                raise QueryError(f"column {tok.col}: {tok.text} is not a number")
            return x
        if tok.kind != "string":
            example = "'2013-06-01T00:00:00Z'" if t == "timestamp" else "'2013-06-01'"
            raise QueryError(
                f"column {tok.col}: attribute {attr.name!r} is a {t}: quote its values, "
                f"e.g. {example}, got {tok.text}"
            )
        if t == "timestamp":
            at = parse_instant(text.strip(), attr.timezone or "UTC")
            if at is None:
                raise QueryError(
                    f"column {tok.col}: {tok.text} is not an ISO 8601 time such as "
                    "'2013-06-01', '2013-06-01T10:00:00Z' or '2013-06-01 10:00-04:00'"
                )
            return at
        day = parse_date(text.strip())
        if day is None:
            raise QueryError(f"column {tok.col}: {tok.text} is not a date 'YYYY-MM-DD'")
        return Fraction(day)

    def exact_value(self, attr: Attribute, tok: _Tok) -> int:
        """The position of a value that must be in the domain (=, IN): a typo must not
        silently spend budget on nothing."""
        value = self.literal(attr, tok)
        if attr.missing_cell and _same(value, attr.missing):
            raise QueryError(
                f"column {tok.col}: {tok.text} is how the data marks a missing "
                f"{attr.name!r}, not one of its values: write {render_name(attr.name)} IS NULL"
            )
        try:
            if isinstance(value, Fraction):
                return attr.exact_position(value)
            return attr.position(value)
        except KeyError:
            if isinstance(value, Fraction):
                inside = attr.number(0) <= value <= attr.number(attr.value_count - 1)
                what = "not a value" if inside else "outside the domain"
                raise QueryError(
                    f"column {tok.col}: value {tok.text} is {what} of {attr.name!r} "
                    f"{attr.describe()}"
                ) from None
            raise QueryError(
                f"column {tok.col}: value {tok.text} is not in the domain of "
                f"{attr.name!r}{_suggest(str(value), attr.values)}"
            ) from None

    def bound(self, attr: Attribute, tok: _Tok, *, up: bool) -> int:
        """A range bound as a position boundary, clamped to the domain as SQL means it:
        the boundary before the value (``up=False``) or after it (``up=True``)."""
        if tok.kind == "number" and attr.type == "integer":  # the common case: int arithmetic
            boundary = int(str(tok.value)) - attr.min + (1 if up else 0)
            return min(max(boundary, 0), attr.value_count)
        value = self.literal(attr, tok)
        if isinstance(value, Fraction):
            if value.denominator == 1 and attr.type == "integer":
                boundary = int(value) - attr.min + (1 if up else 0)
                return min(max(boundary, 0), attr.value_count)
            return attr.boundary(value, after=up)
        return self.exact_value(attr, tok) + (1 if up else 0)

    def require_ordered(self, term: _Term, tok: _Tok) -> None:
        if term.part is None and not term.attr.ordered:
            what = "boolean" if term.attr.type == "boolean" else "unordered categorical"
            raise QueryError(f"column {tok.col}: range {tok.text} on {what} {term.attr.name!r}")


def parse_query(
    text: str, schema: Schema, *, line: int | None = None, _offset: int = 0
) -> Query | BooleanQuery:
    """Parse a WHERE clause over single columns into one query (errors: :class:`QueryError`).

    Grammar: comparisons ``= == != <> < <= > >=`` between a column and a value (either
    side), ``[NOT] BETWEEN a AND b``, ``[NOT] IN (...)``, ``IS [NOT] NULL`` (for an
    attribute that declares a missing-value marker), ``AND``, ``OR``, ``NOT``,
    parentheses, ``TRUE``, ``FALSE``; single-quoted values (``''`` escapes a quote),
    integers, column names bare or in double quotes (``""`` escapes a quote), matched
    case-insensitively when unambiguous; keywords in any case; an optional final ``;``.
    Range bounds outside an ordered domain are clamped (``age < 200`` is every age);
    ``=`` and ``IN`` with a value outside the domain are errors. ``total`` alone covers
    the whole domain. The result is a :class:`Query` when it covers one box, else a
    :class:`~dpcurator.queries.boolean.BooleanQuery` of disjoint boxes.
    """
    if not isinstance(text, str):
        raise QueryError("a query must be a string")
    if text.strip().lower() in ("total", "total;"):  # the query with no predicate: all rows
        return Query(schema, (), "total", line)
    parts = _Parser(text, schema, _offset).parse()
    return make_query(schema, parts, text.strip(), line)


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
