"""Output helpers shared by the subcommands: amounts for people, files by extension,
writable paths checked before any work, and a progress bar.

Amounts. A budget amount is an exact fraction (in the ledger's additive unit: epsilon,
rho, or mu squared). :func:`amount` prints it with at most 6 significant digits, rounded
*down* (a remaining budget is never shown larger than it is) or, with ``up=True``, rounded
up (a privacy loss is never shown smaller than it is): ``1/2`` prints ``0.5``, never
``0.49999999999999994``. :func:`exact` is the exact value as text (``"7/10"``), which the
JSON outputs carry next to every float that could lie.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcurator.errors import InvalidParameter

#: What ``--out`` may end in, and the format each extension means.
FORMATS = {".csv": "csv", ".json": "json", ".parquet": "parquet"}

#: Significant digits of an amount shown to people.
DIGITS = 6


# --- amounts -------------------------------------------------------------------------


def _scaled(x: Fraction, k: int, *, sqrt: bool, up: bool) -> int:
    """floor (or ceil) of x * 10^k, or of sqrt(x) * 10^k; exact integer arithmetic."""
    if sqrt:
        y = x * Fraction(10) ** (2 * k)
        n = math.isqrt(y.numerator // y.denominator)
        if up and Fraction(n * n) < y:
            n += 1
        return n
    y = x * Fraction(10) ** k
    q, r = divmod(y.numerator, y.denominator)
    return q + 1 if up and r else q


def amount(x: Fraction | int, currency: str = "", *, up: bool = False) -> str:
    """An additive amount in the currency's own unit (mu: the square root of mu^2), with
    at most 6 significant digits, rounded down (``up``: rounded up). Exact arithmetic."""
    x = Fraction(x)
    if x <= 0:
        return "0"
    sqrt = currency == "mu"
    # 10^e <= value < 10^(e + 1): an estimate from the digit counts, then corrected.
    e = len(str(x.numerator)) - len(str(x.denominator))
    if sqrt:
        e //= 2
    k = DIGITS - 1 - e
    for _ in range(8):
        n = _scaled(x, k, sqrt=sqrt, up=False)
        if n >= 10**DIGITS:
            k -= 1
        elif n < 10 ** (DIGITS - 1):
            k += 1
        else:
            break
    n = _scaled(x, k, sqrt=sqrt, up=up)
    d = Decimal(n).scaleb(-k).normalize()
    exp = d.adjusted()
    text = format(d, "f") if -7 <= exp < 16 else format(d, "e").replace("e+", "e")
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return text


def exact(x: Fraction | int) -> str:
    """The exact value as text: ``"7/10"``, ``"1"``."""
    return str(Fraction(x))


def amount_float(x: Fraction | int, currency: str = "") -> float:
    """The float of :func:`amount` (rounded down): safe to show as what remains."""
    return float(amount(x, currency))


def amount_json(name: str, x: Fraction | int | None, currency: str, *, up: bool = False):
    """``{name: float, name_exact: "p/q"}`` for a JSON object (None stays None)."""
    if x is None:
        return {name: None, f"{name}_exact": None}
    return {name: float(amount(x, currency, up=up)), f"{name}_exact": exact(x)}


# --- files ---------------------------------------------------------------------------


def check_writable(path: str | os.PathLike[str], flag: str) -> Path:
    """Fail now, in one line, if ``path`` cannot be written later (before any work)."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InvalidParameter(f"{flag} {p}: is a folder; give a file name")
    if not parent.exists():
        raise InvalidParameter(f"{flag} {p}: the folder {parent} does not exist")
    if not parent.is_dir():
        raise InvalidParameter(f"{flag} {p}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InvalidParameter(f"{flag} {p}: permission denied")
    return p


def out_format(path: str | os.PathLike[str], flag: str = "--out") -> str:
    """csv, json or parquet, from the file's extension; anything else is an error."""
    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        raise InvalidParameter(
            f"{flag} {path}: unknown extension {ext or '(none)'!r}; use .csv, .json or .parquet"
        )
    return FORMATS[ext]


def write_rows(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str], fmt: str) -> None:
    """Write ``rows`` to ``path`` atomically (a hidden partial file, then a rename)."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.partial")
    try:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(list(rows)), tmp)
        else:
            with open(tmp, "w", newline="") as fh:
                write_stream(rows, fh, fmt == "json")
        os.replace(tmp, p)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise InvalidParameter(f"cannot write {p}: {err.strerror or err}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_stream(rows: Sequence[dict[str, Any]], stream: Any, as_json: bool) -> None:
    if as_json:
        json.dump(list(rows), stream, indent=1)
        stream.write("\n")
        return
    w = csv.DictWriter(stream, fieldnames=list(rows[0]) if rows else ["query"])
    w.writeheader()
    w.writerows(rows)


def save_figure(fig: Any, path: str | os.PathLike[str], flag: str = "--plot") -> None:
    """Save a matplotlib figure as one line of error on failure."""
    try:
        fig.savefig(path, dpi=130)
    except (OSError, ValueError) as err:
        msg = getattr(err, "strerror", None) or str(err)
        raise InvalidParameter(f"{flag} {path}: cannot write: {msg}") from None


# --- progress ------------------------------------------------------------------------


class _NoBar:
    def step(self, what: str) -> None:
        pass


class _Bar:
    def __init__(self, progress: Any, task: Any) -> None:
        self._p, self._t, self._started = progress, task, False

    def step(self, what: str) -> None:
        """Start the next step, ``what``: the previous one is done."""
        self._p.update(self._t, advance=1 if self._started else 0, description=what)
        self._started = True


@contextmanager
def progress(steps: int, enabled: bool | None = None) -> Iterator[_Bar | _NoBar]:
    """A progress bar on stderr (rich) with ``steps`` steps, shown when stderr is a
    terminal (or ``enabled``); ``bar.step("what comes next")`` advances it."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show:
        yield _NoBar()
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr, force_terminal=enabled or None),
        transient=True,
    ) as p:
        task = p.add_task("starting", total=steps)
        yield _Bar(p, task)
        p.update(task, completed=steps)


def amount_text(exact_text: str, currency: str = "", *, up: bool = False) -> str:
    """:func:`amount` of an exact fraction given as text (``"7/10"``)."""
    return amount(Fraction(exact_text), currency, up=up)


def up(x: float) -> str:
    """A float privacy loss with at most 6 significant digits, rounded up."""
    return amount(Fraction(x), up=True) if x > 0 else "0"


def error_figure(x: float, digits: int = 3) -> str:
    """An expected error ``x`` >= 0 rounded *up* to ``digits`` significant digits (an
    error is never shown smaller than it is), with thousands separators; scientific from
    10^7 (``1.66e11``). Every place that shows an expected error (the summaries, the
    demo's plot) uses this one form, so one figure always reads the same."""
    if not x > 0:
        return "0"
    d = Decimal(x)  # exact
    q = Decimal(1).scaleb(d.adjusted() - digits + 1)
    r = (
        d.quantize(q, rounding=ROUND_CEILING)
        if q < 1
        else (d / q).to_integral_value(rounding=ROUND_CEILING) * q
    )
    if r >= 10**7:
        m = r.scaleb(-r.adjusted())
        return f"{m:.{digits - 1}f}e{r.adjusted()}"
    return f"{r:,f}" if r == r.to_integral_value() else f"{r:f}"
