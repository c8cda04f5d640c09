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
    outside the schema, rows without a unit id, rows over the unit's cap) and replaced.
    Rows without an id and rows over the cap are told apart: the first say something of
    the data's quality, the second of the k chosen."""
    head = f"{report.rows_read:,} rows read, "
    bits = []
    if report.dropped_invalid:
        bits.append(f"{report.dropped_invalid:,} dropped (values outside the schema)")
    u = getattr(report, "unit", None)
    no_id = u.dropped_missing_id if u is not None else 0
    over = report.dropped_privacy_unit - no_id
    if no_id:
        column = f" {u.column!r}" if u is not None else ""
        bits.append(f"{no_id:,} dropped (no id in the privacy unit's column{column})")
    if over:
        cap = "" if unit is None else f": {unit.max_rows:,} rows per {unit.name}"
        bits.append(f"{over:,} dropped (over the privacy unit's limit{cap})")
    for attr, n in sorted(report.replaced.items()):
        bits.append(f"{n:,} with {attr} replaced")
    if not bits and report.rows == report.rows_read:
        return head + "all used"
    return head + f"{report.rows:,} used" + ("; " + ", ".join(bits) if bits else "")


def describe_units(report: Any, unit: PrivacyUnit | None = None) -> list[str]:
    """The privacy unit's part of a report, to choose k: how many units, how many rows
    each holds (before the cap), and how many rows each candidate k would keep."""
    u = getattr(report, "unit", None)
    if u is None:
        return []
    name = unit.name if unit is not None else "unit"
    before = u.rows + u.dropped_by_cap
    share = f" ({u.rows / before:.1%} of {before:,})" if before else ""
    out = [
        f"units: {u.units:,} ({u.column}); rows per {name}: p50 {u.p50:,}, p90 {u.p90:,}, "
        f"p99 {u.p99:,}, max {u.max:,}; k = {u.k:,} keeps {u.rows:,} rows{share}"
        + (f", {u.dropped_missing_id:,} rows without an id dropped" if u.dropped_missing_id else "")
    ]
    if u.kept_by_k:
        out.append("rows kept by k: " + ", ".join(f"{k:,}: {n:,}" for k, n in u.kept_by_k))
    return out


def lines(reports: Mapping[str, Any], unit: PrivacyUnit | None = None) -> list[str]:
    """Each table's lines, named when there are several (a table without a report is
    left out): what loading kept, then the unit's figures."""
    named = len(reports) > 1
    out = []
    for name, r in reports.items():
        if r is not None:
            tag = f"{name}: " if named else ""
            out.append(tag + describe(r, unit))
            out.extend(tag + line for line in describe_units(r, unit))
    return out


def as_json(reports: Mapping[str, Any]) -> dict[str, Any]:
    """Each table's report as JSON: every field the report has."""
    return {
        name: {
            k: dict(v) if isinstance(v, Mapping) else v for k, v in dataclasses.asdict(r).items()
        }
        for name, r in reports.items()
        if r is not None
    }
