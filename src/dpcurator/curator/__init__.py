"""The curator: budgets, refusals, the durable ledger (DESIGN.md §7)."""

from dpcurator.curator.answers import Answer, HistoryEntry, TableAnswer
from dpcurator.curator.curator import AnalystSession, Budget, Curator
from dpcurator.curator.overlap_filter import OverlapFilter, max_loss

__all__ = [
    "AnalystSession",
    "Answer",
    "Budget",
    "Curator",
    "HistoryEntry",
    "OverlapFilter",
    "TableAnswer",
    "max_loss",
]
