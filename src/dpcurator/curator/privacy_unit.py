"""The privacy unit: whom a cost protects, said the same way everywhere.

Without a unit every row is protected on its own, and a cost is per row. With
``PrivacyUnit("tailnum", 50, "aircraft")`` an aircraft may own up to 50 rows (those
beyond are dropped on load), the noise is calibrated to sensitivity 50, and every cost
is per aircraft: the k-fold group privacy of the per-row mechanism (Dwork & Roth 2014,
Lemma 2.8; Bun & Steinke 2016, Prop. 1.9 for zCDP; Dong, Roth & Su 2022 for GDP).

The name is a label for people to read ("per aircraft"): it changes no number, so the
ledger's identity holds the column and k only, and a ledger keeps working when the name
changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpcurator.errors import InvalidParameter

#: The largest k the backends accept (rows one unit may own).
MAX_ROWS = 10**6
#: The longest name shown ("aircraft", "person", "patient").
MAX_NAME = 40
#: The name of a unit that was not given one.
DEFAULT_NAME = "person"


def check_rows(k: object, what: str) -> int:
    """k as an int, or a one-line refusal naming ``what`` (a keyword or a flag)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_ROWS:
        raise InvalidParameter(f"{what} must be an integer from 1 to {MAX_ROWS}, got {k!r}")
    return k


def check_name(name: object, what: str) -> str:
    """A name people read in every answer's text: short, printable, not blank."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or name != name.strip()
        or len(name) > MAX_NAME
        or not name.isprintable()
    ):
        raise InvalidParameter(
            f"{what} must be 1 to {MAX_NAME} printable characters without surrounding "
            f"spaces (e.g. person, aircraft), got {name!r}"
        )
    return name


@dataclass(frozen=True)
class PrivacyUnit:
    """Whom a cost protects: the rows sharing one value of ``column``, at most
    ``max_rows`` of them, called ``name`` in what people read."""

    column: str
    max_rows: int
    name: str = DEFAULT_NAME

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise InvalidParameter(
                f"privacy_unit's column must be non-empty text, got {self.column!r}"
            )
        check_rows(self.max_rows, "privacy_unit's k")
        check_name(self.name, "privacy_unit's name")

    @classmethod
    def of(cls, value: object) -> PrivacyUnit | None:
        """``None``, a PrivacyUnit, ``(column, k)`` or ``(column, k, name)``."""
        if value is None or isinstance(value, PrivacyUnit):
            return value
        if not isinstance(value, tuple) or len(value) not in (2, 3):
            raise InvalidParameter(
                "privacy_unit must be (id_column, k) or (id_column, k, name) with an integer "
                f"1 <= k <= {MAX_ROWS}, got {value!r}"
            )
        return cls(*value)

    @property
    def pair(self) -> tuple[str, int]:
        """(column, k): what the backends and the ledger's identity take."""
        return (self.column, self.max_rows)

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "max_rows": self.max_rows, "name": self.name}

    def describe(self) -> str:
        """``per aircraft (tailnum), up to 50 rows each``."""
        rows = "1 row" if self.max_rows == 1 else f"{self.max_rows:,} rows"
        return f"per {self.name} ({self.column}), up to {rows} each"


def unit_text(unit: PrivacyUnit | None) -> str:
    """Whom a cost protects, in words: the unit's text, or ``per row`` without one."""
    return "per row" if unit is None else unit.describe()
