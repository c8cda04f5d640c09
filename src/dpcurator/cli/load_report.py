"""What loading did to the data, for the custodian's terminal.

The load report depends on the data, so only the commands the custodian runs print it
(``answer``, ``serve``); no HTTP route returns it. Every figure of a
:class:`~dpcurator.backends._validation.LoadReport` is worded here and only here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dpcurator.curator.privacy_unit import PrivacyUnit


def describe(report: Any, unit: PrivacyUnit | None = None) -> str:
    """One table's report in one line: rows read and used, then what was dropped (values
    outside the schema, rows over the unit's cap) and replaced."""
    head = f"{report.rows_read:,} rows read, "
    bits = []
    if report.dropped_invalid:
        bits.append(f"{report.dropped_invalid:,} dropped (values outside the schema)")
    if report.dropped_privacy_unit:
        cap = "" if unit is None else f": {unit.max_rows:,} rows per {unit.name}"
        bits.append(f"{report.dropped_privacy_unit:,} dropped (over the privacy unit's limit{cap})")
    for attr, n in sorted(report.replaced.items()):
        bits.append(f"{n:,} with {attr} replaced")
    if not bits and report.rows == report.rows_read:
        return head + "all used"
    return head + f"{report.rows:,} used" + ("; " + ", ".join(bits) if bits else "")


def lines(reports: Mapping[str, Any], unit: PrivacyUnit | None = None) -> list[str]:
    """Each table's line, named when there are several (a table without a report is
    left out)."""
    named = len(reports) > 1
    return [
        (f"{name}: " if named else "") + describe(r, unit)
        for name, r in reports.items()
        if r is not None
    ]


def as_json(reports: Mapping[str, Any]) -> dict[str, Any]:
    """Each table's report as JSON: every field the report has."""
    return {
        name: {
            k: dict(v) if isinstance(v, Mapping) else v for k, v in dataclasses.asdict(r).items()
        }
        for name, r in reports.items()
        if r is not None
    }
