"""Why a ledger refuses a curator: what its identity holds against what was asked for.

A ledger's charges are only meaningful under the budget, the schemas and the privacy
unit they were made for (a unit's k bounds each unit's loss), so a curator asking for
anything else is refused. The refusal names each part that differs, the ledger's and
the curator's side by side, so that the one thing to change is visible (most often the
privacy unit's column or k, which a command line gives apart from the schemas).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The identity's fields that make up the budget.
_BUDGET = ("budget", "currency", "amount")


def _unit(pair: Any, whose: str) -> str:
    if not pair:
        return f"{whose} has no privacy unit"
    column, k = pair
    return f"{whose}'s privacy unit is column {column!r} with k = {k}"


def mismatch_message(location: str, have: Mapping[str, Any], want: Mapping[str, Any]) -> str:
    """The one-line refusal of a curator whose identity ``want`` is not the ledger's
    ``have`` (both without the unit key)."""
    parts = []
    if any(have.get(f) != want.get(f) for f in _BUDGET):
        parts.append(f"the ledger's budget is {have.get('budget')}, not {want.get('budget')}")
    tables, asked = have.get("tables") or {}, want.get("tables") or {}
    if sorted(tables) != sorted(asked):
        parts.append(f"the ledger's tables are {sorted(tables)}, not {sorted(asked)}")
    else:
        other = [n for n in sorted(tables) if tables[n] != asked[n]]
        if other:
            parts.append(f"the schema of {', '.join(repr(n) for n in other)} differs")
    if (have.get("privacy_unit") or None) != (want.get("privacy_unit") or None):
        parts.append(
            f"{_unit(have.get('privacy_unit'), 'the ledger')}, "
            f"{_unit(want.get('privacy_unit'), 'this curator')}"
        )
    if not parts:  # a field this version does not know
        parts.append(f"budget {have.get('budget')}, tables {sorted(tables)}")
    return (
        f"ledger {location} belongs to another curator ({'; '.join(parts)}); open it with "
        "the same budget, schemas and privacy unit, or use a new ledger"
    )
