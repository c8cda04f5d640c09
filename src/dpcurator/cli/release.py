"""What ``dpcurator answer`` and ``dpcurator demo`` print and write about a release:
post-processing, the interval of every answer at a chosen confidence, the rows.

Intervals describe the answer as written (the ``answer`` column), post-processed or not:

* no post-processing: the exact interval ``noisy ± h``, h the smallest integer with
  P(|noise| <= h) >= confidence under the exact discrete distribution;
* ``consistent``: the least-squares answers are a linear function of the noisy ones, so
  their error is a weighted sum of the independent noises, with an exactly known
  variance (:func:`dpcurator.planner.consistency.consistent_variances`); the interval is
  the normal approximation ``answer ± z·sd``. When computing every variance would take
  too long (more than 2,000 queries), sd is the raw noise's standard deviation, an upper
  bound (a consistent answer is never noisier than the raw one);
* ``clamp`` and ``round`` are monotone and the true count is a non-negative integer, so
  the interval's ends are clamped (or rounded outwards) with the same coverage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter

POSTPROCESS = ("none", "clamp", "round", "consistent")


def postprocess_steps(text: str) -> list[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in steps if s not in POSTPROCESS]
    if bad or not steps:
        raise InvalidParameter(
            f"--postprocess: unknown option {bad[0] if bad else text!r}; choose from "
            f"{', '.join(POSTPROCESS)} (comma-separated)"
        )
    return [s for s in steps if s != "none"]


def check_confidence(c: float) -> float:
    if not (math.isfinite(c) and 0 < c < 1):
        raise InvalidParameter(f"--confidence must be a number in (0, 1), e.g. 0.95; got {c:g}")
    return c


def noise_of(name: str, parameter: float) -> Any:
    """The noise an answer reports (its name and scale or sigma)."""
    from dpcurator.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise

    p = Fraction(parameter)
    return DiscreteLaplaceNoise(p) if name == "discrete_laplace" else DiscreteGaussianNoise(p)


@dataclass
class Released:
    """Post-processed answers with their intervals, and how the intervals were made."""

    values: np.ndarray
    low: np.ndarray
    high: np.ndarray
    raw_half: list[int]
    method: list[str]  # how each interval was made, for the output's "interval" column
    note: str | None  # said in the summary when the intervals are approximate or bounds


def release_intervals(
    plan: Any,
    answers: Sequence[Any],
    steps: Sequence[str],
    confidence: float = 0.95,
    system: Any = None,
    exact_rows: Sequence[int] = (),
) -> Released:
    """Apply ``steps`` to the noisy answers and carry each answer's interval along.

    ``exact_rows``: rows whose consistent-answer variance is computed exactly even when
    the workload is too large for every row's (the demo's showcase table)."""
    from dpcurator.planner import consistent
    from dpcurator.planner.consistency import (
        consistency_system,
        consistent_variances,
        exact_variances_cheap,
    )

    alpha = 1.0 - confidence
    if getattr(plan, "strategy", None) is not None:
        return _derived_intervals(plan, answers, steps, alpha)
    noises: dict[tuple[str, float], Any] = {}
    half: list[int] = []
    sd: list[float] = []
    for a in answers:
        key = (a.noise, a.noise_parameter)
        if key not in noises:
            n = noise_of(*key)
            noises[key] = (n, n.interval(alpha), math.sqrt(n.variance()))
        half.append(noises[key][1])
        sd.append(noises[key][2])
    y = np.array([a.value for a in answers], float)
    h = np.array(half, float)
    vals, low, high = y.copy(), y - h, y + h
    method, note = ["exact"] * len(answers), None
    for s in steps:
        if s == "consistent":
            var = np.array([n.variance() for n in plan.noises])
            sys_ = consistency_system(plan.queries) if system is None else system
            vals = consistent(plan.queries, vals, var, sys_)
            z = NormalDist().inv_cdf(1 - alpha / 2)
            if exact_variances_cheap(sys_):
                cv = consistent_variances(plan.queries, var, list(range(len(vals))), sys_)
                s_d = np.sqrt(cv)
                method = ["normal approximation, exact variance"] * len(vals)
            else:
                s_d = np.array(sd, float)
                rows = list(exact_rows)
                method = ["normal approximation, variance bound"] * len(vals)
                if rows:
                    s_d[rows] = np.sqrt(consistent_variances(plan.queries, var, rows, sys_))
                    for r in rows:
                        method[r] = "normal approximation, exact variance"
                note = (
                    "the intervals of consistent answers use the raw noise's standard "
                    "deviation, an upper bound (every variance exactly would take too long)"
                )
            low, high = vals - z * s_d, vals + z * s_d
        elif s == "clamp":
            vals, low, high = np.maximum(vals, 0.0), np.maximum(low, 0.0), np.maximum(high, 0.0)
            method = [m + ", clamped" for m in method]
        elif s == "round":
            vals, low, high = np.rint(vals), np.floor(low), np.ceil(high)
            method = [m + ", rounded" for m in method]
    if "consistent" in steps and note is None:
        note = (
            "intervals of consistent answers: normal approximation with each answer's "
            "exact variance"
        )
    return Released(vals, low, high, half, method, note)


def _derived_intervals(
    plan: Any, answers: Sequence[Any], steps: Sequence[str], alpha: float
) -> Released:
    """A strategy's answers are least-squares estimates already (``consistent`` changes
    nothing): the interval is the normal approximation with the exact variance."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    vals = np.array([a.value for a in answers], float)
    sd = np.sqrt(np.maximum(np.array([a.variance for a in answers], float), 0.0))
    low, high = vals - z * sd, vals + z * sd
    method = ["normal approximation, exact variance"] * len(vals)
    for s in steps:
        if s == "clamp":
            vals, low, high = np.maximum(vals, 0.0), np.maximum(low, 0.0), np.maximum(high, 0.0)
            method = [m + ", clamped" for m in method]
        elif s == "round":
            vals, low, high = np.rint(vals), np.floor(low), np.ceil(high)
            method = [m + ", rounded" for m in method]
    note = (
        f"answers derived by least squares from the {plan.strategy.name} strategy's "
        "measurements (consistent by construction); intervals: normal approximation with "
        "each answer's exact variance"
    )
    return Released(vals, low, high, [], method, note)


def _num(v: float) -> float | int:
    f = float(v)
    return int(f) if f.is_integer() else f


def rows_of(plan: Any, answers: Sequence[Any], rel: Released, confidence: float) -> list[dict]:
    """One row per query: the answer as released (post-processed if asked) and its
    interval at ``confidence``, then the noisy answer and its noise."""
    if getattr(plan, "strategy", None) is not None:
        return [
            {
                "query": q.text or "total",
                "line": q.line,
                "answer": _num(rel.values[i]),
                "interval_low": _num(rel.low[i]),
                "interval_high": _num(rel.high[i]),
                "confidence": confidence,
                "interval": rel.method[i],
                "strategy": a.strategy,
                "variance": a.variance,
                "charges": ",".join(map(str, a.charge_ids)),
                "currency": a.currency,
            }
            for i, (q, a) in enumerate(zip(plan.queries, answers, strict=True))
        ]
    rows = []
    for i, (q, a, noise, cost) in enumerate(
        zip(plan.queries, answers, plan.noises, plan.values, strict=True)
    ):
        rows.append(
            {
                "query": q.text or "total",
                "line": q.line,
                "answer": _num(rel.values[i]),
                "interval_low": _num(rel.low[i]),
                "interval_high": _num(rel.high[i]),
                "confidence": confidence,
                "interval": rel.method[i],
                "noisy_answer": a.value,
                "noisy_half_width": rel.raw_half[i],
                "cost": cost,  # exactly what was charged (mu: its square is charged)
                "currency": a.currency,
                "noise": a.noise,
                "noise_parameter": a.noise_parameter,
                "expected_abs_noise": noise.expected_abs(),
            }
        )
    return rows
