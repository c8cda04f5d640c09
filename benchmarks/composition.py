"""Composition benchmark: every method's epsilon over (k, eps, delta) grids, side by side
with dp-accounting's PLD and diffprivlib's KOV (the anchors), in the same run.

    .venv/bin/pip install -e '.[dev,bench]'
    .venv/bin/python benchmarks/composition.py

Prints one table of epsilons, then timings: ``optimal`` at k = 100,000 (certified: the
float root plus its exact fixed-point enclosure, median of 5 runs) and ``pld`` with 10,000
distinct epsilons, and the whole ``dpcurator account --json`` for 100,000 mechanisms.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

from dpcurator.privacy import PureDP
from dpcurator.privacy.composition import compose
from dpcurator.privacy.events import Guaranteed
from dpcurator.privacy.optimal import optimal_epsilon


def anchor_pld(eps: float, k: int, delta: float) -> float:
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    one = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(eps, 0.0))
    return float(one.self_compose(k).get_epsilon_for_delta(delta))


def anchor_kov(eps: float, k: int, delta: float) -> float | None:
    try:
        from diffprivlib.accountant import BudgetAccountant
    except ImportError:
        return None
    acc = BudgetAccountant()
    for _ in range(k):
        acc.spend(eps, 0.0)
    return float(acc.total(slack=delta)[0])


def table() -> None:
    methods = ["basic", "advanced", "kov", "optimal", "pld", "zcdp", "gdp", "clt"]
    head = ["k", "eps", "delta", *methods, "dpacc-PLD", "diffprivlib-KOV", "best"]
    print(" | ".join(f"{h:>10}" for h in head))
    for k in (10, 100, 1000, 10_000):
        for eps in (0.01, 0.1, 1.0):
            for delta in (1e-5, 1e-9):
                r = compose([Guaranteed(PureDP(eps), k)], delta=delta)
                cells = [f"{k:>10}", f"{eps:>10g}", f"{delta:>10g}"]
                for m in methods:
                    cells.append(f"{r[m].epsilon:>10.5g}" if m in r.methods else f"{'-':>10}")
                pld_anchor = anchor_pld(eps, k, delta)
                kov_anchor = anchor_kov(eps, k, delta) if k <= 1000 else None
                cells.append(f"{pld_anchor:>10.5g}")
                cells.append(
                    f"{kov_anchor:>10.5g}" if kov_anchor is not None else f"{'(skip)':>10}"
                )
                cells.append(f"{r.best.method:>10}")
                print(" | ".join(cells))


def timings() -> None:
    print()
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        eps = optimal_epsilon(0.01, 0.0, 100_000, 1e-5)
        runs.append(time.perf_counter() - t)
    t_opt = sorted(runs)[len(runs) // 2]
    print(
        f"optimal, k = 100,000 of (0.01, 0)-DP at delta 1e-5: eps = {eps:.12g} in {t_opt * 1e3:.1f} ms"
    )

    t = time.perf_counter()
    anchor = anchor_pld(0.01, 100_000, 1e-5)
    t_anchor = time.perf_counter() - t
    print(
        f"dp-accounting PLD, same (default discretisation): eps = {anchor:.12g} in {t_anchor * 1e3:.0f} ms"
        f"  (optimal / PLD - 1 = {eps / anchor - 1:+.2e})"
    )

    epsilons = np.linspace(0.001, 0.01, 10_000)
    events = [Guaranteed(PureDP(float(e))) for e in epsilons]
    t = time.perf_counter()
    r = compose(events, delta=1e-5, methods=["pld", "kov"])
    t_pld = time.perf_counter() - t
    print(
        f"pld, 10,000 distinct epsilons in [0.001, 0.01] at delta 1e-5: eps = {r['pld'].epsilon:.6g}"
        f" (kov {r['kov'].epsilon:.6g}) in {t_pld:.2f} s"
    )

    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "dpcurator.cli", "account", "--json", "pure:0.1x100000"],
        capture_output=True,
        text=True,
        check=True,
    )
    t_cli = time.perf_counter() - t
    best = json.loads(p.stdout)["best"]
    print(
        f"dpcurator account --json pure:0.1x100000: {t_cli:.2f} s wall, start-up included; best {best}"
    )


if __name__ == "__main__":
    table()
    timings()
