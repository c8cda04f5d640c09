"""The query language: SQL's WHERE over single columns (the workload format built on it
is :mod:`dpcurator.queries.workload`).

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
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from dpcurator.errors import QueryError
from dpcurator.queries import boxes as bx
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.boolean import make as make_query
from dpcurator.queries.parts import PARTS, Part, part_of
from dpcurator.queries.predicates import (
    KEYWORDS,
    IntervalSet,
    Query,
    complement,
    normalize,
    render_name,
)
from dpcurator.queries.schema import Attribute, Schema
from dpcurator.queries.values import (
    number_of,
    parse_boolean,
    parse_date,
    parse_instant,
    parse_number,
)

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
            if tok.isalpha():  # a letter beyond A-Z: bare names are ASCII
                rest = re.match(r"[\w.\-]*", text[m.end() :])
                name = tok + (rest.group() if rest else "")
                raise QueryError(
                    f"column {col}: a name with letters beyond A-Z is written in double "
                    f'quotes: "{name}"'
                )
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
