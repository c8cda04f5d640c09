"""The curator: budgets, refusals, the durable ledger."""

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
