"""The curator: budgets, refusals, the durable ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpcurator import _lazy_exports

if TYPE_CHECKING:
    from dpcurator.curator.answers import (
        Answer,
        DerivedAnswer,
        HistoryEntry,
        Statistic,
        StatisticAnswer,
        TableAnswer,
    )
    from dpcurator.curator.budget import Budget
    from dpcurator.curator.curator import AnalystSession, Curator, Estimate, Remaining
    from dpcurator.curator.overlap_filter import OverlapFilter, max_loss
    from dpcurator.curator.privacy_unit import PrivacyUnit

__all__ = [
    "AnalystSession",
    "Answer",
    "Budget",
    "Curator",
    "DerivedAnswer",
    "Estimate",
    "HistoryEntry",
    "OverlapFilter",
    "PrivacyUnit",
    "Remaining",
    "Statistic",
    "StatisticAnswer",
    "TableAnswer",
    "max_loss",
]

#: Where each public name lives, imported when first asked for (PEP 562): a solver
#: worker needs the overlap filter, not DuckDB.
_HOMES = {
    "AnalystSession": "dpcurator.curator.curator",
    "Answer": "dpcurator.curator.answers",
    "Budget": "dpcurator.curator.budget",
    "Curator": "dpcurator.curator.curator",
    "DerivedAnswer": "dpcurator.curator.answers",
    "Estimate": "dpcurator.curator.curator",
    "HistoryEntry": "dpcurator.curator.answers",
    "OverlapFilter": "dpcurator.curator.overlap_filter",
    "PrivacyUnit": "dpcurator.curator.privacy_unit",
    "Remaining": "dpcurator.curator.curator",
    "Statistic": "dpcurator.curator.answers",
    "StatisticAnswer": "dpcurator.curator.answers",
    "TableAnswer": "dpcurator.curator.answers",
    "max_loss": "dpcurator.curator.overlap_filter",
}


__getattr__ = _lazy_exports(__name__, _HOMES)
