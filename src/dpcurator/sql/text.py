"""The pre-pass over SQL text, before sqlglot reads it.

Two things in a DP ``SELECT`` are not SQL sqlglot knows:

* the clause ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, delta=1e-6, ...)``:
  it is found among sqlglot's own tokens (so a string or a quoted name that happens to
  hold those words is never touched), read into ``name -> value`` text, and cut out;
* the DP aggregates ``AVG``, ``SUM``, ``VAR_POP``, ``STDDEV_POP`` and
  ``PERCENTILE_CONT``: sqlglot parses them as its built-ins, which take one argument and
  refuse ``contribution_bounds_per_group => (0, 100)``; renamed ``DP_AVG`` and so on,
  they are anonymous functions whose every argument sqlglot keeps.

``EXPLAIN`` in front is taken off too. Everything else is left to sqlglot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot.dialects.bigquery import BigQuery
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from dpcurator.errors import QueryError

#: The aggregates sqlglot would read as its one-argument built-ins.
RENAMED = ("AVG", "SUM", "VAR_POP", "STDDEV_POP", "PERCENTILE_CONT")
#: The prefix they get (a name no schema attribute needs).
PREFIX = "DP_"
#: The longest SQL text read (characters).
MAX_SQL = 20_000
#: Parentheses and NOTs may nest this deep (sqlglot's parser recurses about 20 frames a
#: level: past 45 it meets Python's recursion limit).
MAX_NESTING = 32
#: The most AND, OR and NOT one SELECT may hold (each makes a node of its tree).
MAX_OPERATORS = 256

_DIALECT = BigQuery()


@dataclass(frozen=True)
class PreParsed:
    """The text sqlglot reads, the options as written, and whether it was an EXPLAIN.

    ``text`` keeps every offset of the SQL as written except after each renamed
    aggregate (``renamed``: where each :data:`PREFIX` was put in), so that a position
    sqlglot reports can be told in the user's own text (:meth:`original`): the DP
    clause and ``EXPLAIN`` are blanked, not cut out."""

    text: str
    options: tuple[tuple[str, str], ...]
    explain: bool
    has_clause: bool
    renamed: tuple[int, ...] = ()
    written: str = ""  # the SQL as written

    def original(self, offset: int) -> int:
        """The offset in the SQL as written of ``offset`` in :attr:`text`."""
        shift = 0
        for at in self.renamed:
            if offset >= at + len(PREFIX):
                shift += len(PREFIX)
            elif offset >= at:
                return at - shift
        return offset - shift


#: A code point of the surrogate range: in a Python text, half of a pair (a JSON body's
#: ``"\\ud800"`` alone).
_SURROGATE = re.compile("[\ud800-\udfff]")


#: What an unclosed delimiter opened (sqlglot's tokenizer names only the delimiter).
_UNCLOSED = {"'": "a string", '"': "a string", "`": "a quoted name", "*/": "a /* comment"}


def tokens(text: str) -> list[Token]:
    """sqlglot's tokens of ``text``; a text it cannot split (an unclosed string, name or
    comment) is refused in one line of ours, not sqlglot's, which quotes 100 characters
    of context."""
    try:
        return _DIALECT.tokenize(text)
    except SqlglotError as err:
        cause = str(err.__cause__ or err)
        missing = re.match(r"Missing (\S+) from", cause)
        if missing is not None and missing.group(1) in _UNCLOSED:
            raise QueryError(
                f"SQL: {_UNCLOSED[missing.group(1)]} is not closed (no closing {missing.group(1)})"
            ) from None
        raise QueryError("SQL: the text is not SQL sqlglot can read (a malformed token)") from None


def position(text: str, offset: int) -> str:
    """``column C`` (one line) or ``line L, column C`` of ``offset`` (0-based) in text."""
    before = text[:offset]
    line = before.count("\n")
    column = offset - (before.rfind("\n") + 1) + 1
    return f"line {line + 1}, column {column}" if "\n" in text else f"column {column}"


def decode(data: bytes) -> str:
    """SQL read as bytes (a file, stdin, a command line's argument), as text: strictly
    UTF-8, the byte-order mark some editors put first taken off. An invalid byte is
    named as one; Python's own reading of argv and of stdin in a C locale would make it
    a lone surrogate (U+DCFF), a message about something the user never wrote."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        text = data[: err.start].decode("utf-8")
        raise QueryError(
            f"SQL: invalid UTF-8 byte 0x{data[err.start]:02X} at {position(text, len(text))}"
        ) from None


def syntax_error(err: SqlglotError, pre: PreParsed) -> QueryError:
    """sqlglot's parse error as one line of ours: its position told in the SQL as
    written (sqlglot reads the renamed text), its description without sqlglot's class
    names, and, if the text holds a ``--`` comment, that it runs to the line's end
    (``x > --4000`` reads as ``x >``)."""
    errors = getattr(err, "errors", None) or [{}]
    first = errors[0]
    highlight = str(first.get("highlight") or "")
    description = str(first.get("description") or "")
    if description.startswith("Required keyword"):
        what = ": an operand is missing"
    elif description.startswith("Expecting "):
        what = f": expected {description[len('Expecting ') :].strip()!r}"
    elif description.startswith("Adjacent string literals"):  # 'a''b'
        what = ": two strings side by side; write a quote inside a string as \\'"
    elif description.startswith("Invalid expression") or re.search(
        r"<|sqlglot|Token|[A-Z]{2}", description
    ):
        what = ""  # sqlglot's own wording, its classes and tokens: the position says it
    else:
        what = f": {description[:1].lower()}{description[1:]}"
    where = ""
    line, col = first.get("line"), first.get("col")
    if isinstance(line, int) and isinstance(col, int) and line >= 1 and col >= 1:
        lines = pre.text.split("\n")
        if line <= len(lines):
            end = sum(len(x) + 1 for x in lines[: line - 1]) + col  # one past the token
            start = pre.original(max(end - max(len(highlight), 1), 0))
            where = position(pre.written, start) + ": "
    at = f" at {highlight!r}" if highlight else " at the end"
    hint = "; note that -- starts a comment to the end of the line" if _dash_comment(pre) else ""
    return QueryError(f"SQL: {where}syntax error{at}{what}{hint}")


def _dash_comment(pre: PreParsed) -> bool:
    """Whether the text holds a ``--`` comment (looked for between sqlglot's tokens, so
    a string or quoted name holding ``--`` is not one)."""
    try:
        toks = _DIALECT.tokenize(pre.text)
    except SqlglotError:
        return False
    at = 0
    for t in toks:
        if "--" in pre.text[at : t.start]:
            return True
        at = t.end + 1
    return "--" in pre.text[at:]


def pre_parse(text: object) -> PreParsed:
    """Find and cut the DP clause, rename the DP aggregates (see the module docstring)."""
    if not isinstance(text, str):
        raise QueryError(f"SQL must be text, got {type(text).__name__}")
    if len(text) > MAX_SQL:
        raise QueryError(f"SQL of {len(text)} characters exceeds {MAX_SQL}")
    written = text
    lone = _SURROGATE.search(text)
    if lone is not None:  # (no Unicode text holds one: it could not be recorded)
        raise QueryError(
            f"SQL: {position(text, lone.start())}: U+{ord(lone.group()):04X} is half of a "
            "surrogate pair, not a character"
        )
    explain = False
    toks = tokens(text)
    if toks and toks[0].token_type == TokenType.COMMAND and toks[0].text.upper() == "EXPLAIN":
        # sqlglot reads EXPLAIN as a command whose one string token swallows the rest;
        # found as a token (after any comments), blanked, and the text read again
        first = toks[0]
        explain, text = True, text[: first.start] + " " * len(first.text) + text[first.end + 1 :]
        toks = tokens(text)
    _bounded(toks)
    start = 0
    if start >= len(toks) or toks[start].token_type != TokenType.SELECT:
        got = toks[start].text if start < len(toks) else "nothing"
        raise QueryError(f"SQL: expected SELECT WITH DIFFERENTIAL_PRIVACY ..., got {got!r}")
    if (
        start + 2 < len(toks)
        and toks[start + 1].token_type == TokenType.WITH
        and toks[start + 2].text.upper() == "ANONYMIZATION"
    ):
        raise QueryError(
            "SQL: WITH ANONYMIZATION is BigQuery's old syntax: write SELECT WITH "
            "DIFFERENTIAL_PRIVACY OPTIONS(epsilon=...) with COUNT, SUM, AVG (not ANON_COUNT ...)"
        )
    cuts: list[tuple[int, int, str]] = []  # (start, end inclusive, replacement)
    options: list[tuple[str, str]] = []
    has_clause = False
    i = start + 1
    if (
        i + 2 < len(toks)
        and toks[i].token_type == TokenType.WITH
        and toks[i + 1].text.upper() == "DIFFERENTIAL_PRIVACY"
    ):
        has_clause = True
        j = i + 2
        if (
            toks[j].text.upper() != "OPTIONS"
            or j + 1 >= len(toks)
            or toks[j + 1].token_type != TokenType.L_PAREN
        ):
            raise QueryError(
                f"SQL: expected OPTIONS(...) after WITH DIFFERENTIAL_PRIVACY, got {toks[j].text!r}"
            )
        j, options = _options(toks, j + 2)
        clause = text[toks[i].start : toks[j].end + 1]  # blanked: offsets kept
        cuts.append((toks[i].start, toks[j].end, re.sub(r"[^\n]", " ", clause)))
    for k, t in enumerate(toks[:-1]):
        if (
            t.text.upper() in RENAMED
            and t.token_type not in (TokenType.IDENTIFIER, TokenType.STRING)
            and toks[k + 1].token_type == TokenType.L_PAREN
        ):
            cuts.append((t.start, t.end, PREFIX + t.text.upper()))
    out, at, renamed, length = [], 0, [], 0
    for s, e, repl in sorted(cuts):
        out.append(text[at:s])
        length += s - at
        if repl.startswith(PREFIX):
            renamed.append(length)
        out.append(repl)
        length += len(repl)
        at = e + 1
    out.append(text[at:])
    return PreParsed("".join(out), tuple(options), explain, has_clause, tuple(renamed), written)


def _bounded(toks: list[Token]) -> None:
    """Refuse, before any parser recurses into it, a text nested deeper than
    :data:`MAX_NESTING` or holding more than :data:`MAX_OPERATORS` boolean operators."""
    depth = nots = worst = operators = 0
    for t in toks:
        kind = t.token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        if kind in (TokenType.AND, TokenType.OR, TokenType.NOT):
            operators += 1
        nots = nots + 1 if kind == TokenType.NOT else 0
        worst = max(worst, depth + nots)
    if worst > MAX_NESTING:
        raise QueryError(f"SQL: nested more than {MAX_NESTING} deep")
    if operators > MAX_OPERATORS:
        raise QueryError(
            f"SQL: {operators} AND, OR and NOT in one SELECT, over {MAX_OPERATORS}; "
            "use IN (...) or BETWEEN"
        )


def _options(toks: list[Token], j: int) -> tuple[int, list[tuple[str, str]]]:
    """``name = value`` pairs up to the closing parenthesis; returns its index."""
    out: list[tuple[str, str]] = []
    while True:
        if j >= len(toks):
            raise QueryError("SQL: OPTIONS( is not closed")
        t = toks[j]
        if t.token_type == TokenType.R_PAREN and not out:
            return j, out
        if t.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) and not t.text.isidentifier():
            raise QueryError(f"SQL: OPTIONS: expected a name such as epsilon, got {t.text!r}")
        name = t.text.lower()
        if j + 2 >= len(toks) or toks[j + 1].token_type != TokenType.EQ:
            raise QueryError(f"SQL: OPTIONS: expected {name} = value")
        v = toks[j + 2]
        value = v.text
        k = j + 3
        if v.token_type == TokenType.DASH and k < len(toks):  # a negative number
            value, k = "-" + toks[k].text, k + 1
        elif v.token_type == TokenType.PLUS and k < len(toks):  # +0.01: the number itself
            value, k = toks[k].text, k + 1
        out.append((name, value))
        if k >= len(toks):
            raise QueryError("SQL: OPTIONS( is not closed")
        if toks[k].token_type == TokenType.R_PAREN:
            return k, out
        if toks[k].token_type != TokenType.COMMA:
            raise QueryError(
                f"SQL: OPTIONS: expected ',' or ')' after {name} = {value}, got {toks[k].text!r}"
            )
        j = k + 1
