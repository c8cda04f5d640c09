"""Plots for the CLI (matplotlib is imported only when a plot is asked for)."""

from __future__ import annotations

import numpy as np

from dpcurator.privacy.composition import Accountant
from dpcurator.privacy.tradeoff import TradeOff, f_eps_delta, grid


def composed_tradeoff(acc: Accountant, alpha: np.ndarray, points: int = 80) -> TradeOff | None:
    """The trade-off curve a method certifies: sup over its (eps, delta(eps)) pairs.

    Each pair is a valid (eps, delta) guarantee of that method, so the supremum of the
    f_{eps,delta} is valid too (Dong, Roth & Su 2022, Prop. 2.12).
    """
    eps_max = acc.epsilon(1e-9)
    if eps_max is None or eps_max <= 0:
        return None
    beta = np.zeros_like(alpha)
    for eps in np.linspace(0.0, eps_max * 1.2, points):
        d = acc.delta(float(eps))
        if d < 1:
            beta = np.maximum(beta, f_eps_delta(float(eps), d, alpha).beta)
    return TradeOff(alpha, beta, acc.method)


def plot_tradeoffs(accountants: list[Accountant], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alpha = grid(801)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.plot(alpha, 1 - alpha, color="grey", linestyle=":", label="perfect privacy (1 - alpha)")
    for acc in accountants:
        curve = composed_tradeoff(acc, alpha)
        if curve is None:
            continue
        style = "-" if acc.rigorous else "--"
        label = acc.method if acc.rigorous else f"{acc.method} (approximation)"
        ax.plot(curve.alpha, curve.beta, style, label=label)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("type I error alpha")
    ax.set_ylabel("type II error beta (higher is more private)")
    ax.set_title(f"Composed trade-off curves\n{title}" if title else "Composed trade-off curves")
    ax.legend(loc="upper right")
    ax.set_aspect("equal")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
