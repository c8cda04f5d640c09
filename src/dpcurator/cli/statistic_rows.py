"""The rows ``dpcurator answer`` writes for a workload with statistic lines.

Counts keep their rows (:func:`dpcurator.cli.release.rows_of`, with their post-processing
and intervals); a statistic line gives one row per result (group and quantile), with the
same columns plus ``group``, ``q``, ``std_error``, ``rank_error`` and ``small_group``
(true where a group's noisy count is too small to carry information: no value, the
interval the statistic's whole range): the value, its
rigorous 95% interval (means, variances, standard deviations) or its 95% rank-error
bound (quantiles), and its cost and mechanism.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from dpcurator.cli.release import Released, release_intervals, rows_of
from dpcurator.errors import InvalidParameter

EXTRA = ("group", "q", "std_error", "rank_error", "small_group")


def check_statistics(
    workload: Any, steps: Sequence[str], fmt: str | None, schema: Any, strategy: str
) -> None:
    """Refuse, before anything is charged, what a workload with statistics cannot do."""
    if not workload.statistics:
        return
    if strategy not in ("auto", "direct"):
        raise InvalidParameter(
            f"--strategy {strategy} measures counts; a workload with statistic lines (mean, "
            "quantile, ...) is released directly: --strategy direct"
        )
    if "consistent" in steps:
        raise InvalidParameter(
            "--postprocess consistent adjusts counts to one another; this workload has "
            "statistic lines (mean, quantile, ...): leave it out"
        )
    if fmt == "parquet" and any(
        s is not None and s.attribute and schema.attribute(s.attribute).type == "categorical"
        for s in workload.statistics
    ):
        raise InvalidParameter(
            "--out .parquet holds one type per column and a quantile of a categorical "
            "attribute is text: write .csv or .json"
        )


def mixed_rows(
    plan: Any, specs: Sequence[Any], answers: Sequence[Any], steps: Sequence[str], confidence: float
) -> tuple[list[dict[str, Any]], Released]:
    """Every row in workload order: the counts post-processed as usual, the statistics'
    results as released."""
    idx = [i for i, s in enumerate(specs) if s is None]
    sub = dataclasses.replace(
        plan,
        queries=tuple(plan.queries[i] for i in idx),
        weights=tuple(plan.weights[i] for i in idx),
        values=tuple(plan.values[i] for i in idx),
        noises=tuple(plan.noises[i] for i in idx),
    )
    counted = [answers[i] for i in idx]
    rel = release_intervals(sub, counted, steps, confidence)
    count_rows = iter(rows_of(sub, counted, rel, confidence))
    rows: list[dict[str, Any]] = []
    for i, (q, spec) in enumerate(zip(plan.queries, specs, strict=True)):
        if spec is None:
            rows.append({**next(count_rows), **dict.fromkeys(EXTRA)})
            continue
        a = answers[i]
        if spec.kind == "units":  # one noisy number, like a count's
            rows.append(
                {
                    "query": a.query,
                    "line": q.line,
                    "answer": a.value,
                    "interval_low": a.interval[0],
                    "interval_high": a.interval[1],
                    "confidence": 0.95,
                    "interval": "rigorous: exact noise",
                    "noisy_answer": a.value,
                    "noisy_half_width": a.half_width,
                    "cost": plan.values[i],
                    "currency": a.currency,
                    "noise": a.noise,
                    "noise_parameter": a.noise_parameter,
                    "expected_abs_noise": None,
                    **dict.fromkeys(EXTRA),
                }
            )
            continue
        for r in a.results:
            low, high = r.interval if r.interval is not None else (None, None)
            rows.append(
                {
                    "query": a.request,
                    "line": q.line,
                    "answer": r.value,
                    "interval_low": low,
                    "interval_high": high,
                    "confidence": 0.95,
                    "interval": "rigorous: exact noise, union bound"
                    if r.interval is not None
                    else f"rank within {r.rank_error} rows of the quantile's",
                    "noisy_answer": r.value,
                    "noisy_half_width": None,
                    "cost": plan.values[i],
                    "currency": a.currency,
                    "noise": a.mechanism,
                    "noise_parameter": None,
                    "expected_abs_noise": None,
                    "group": r.group,
                    "q": r.q,
                    "std_error": r.std_error,
                    "rank_error": r.rank_error,
                    "small_group": r.small_group if r.interval is not None else None,
                }
            )
    return rows, rel
