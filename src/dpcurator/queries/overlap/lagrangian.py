"""Branch and bound over attributes with a Lagrangian bound, for cores without structure.

The bound (:mod:`~dpcurator.queries.overlap.lagrangian_bound`): split each query's
weight among its attributes; the sum over attributes of the best atom's share bounds
gamma_w for every split (Lagrangian relaxation, Held & Karp 1971; Fisher 1981), and
subgradient steps bring it near the LP bound of the 0/1 program without family rows.
The search (:mod:`~dpcurator.queries.overlap.lagrangian_search`): depth-first over
attributes, children bounded together, from a coordinate-ascent starting point; under a
time limit it proves thresholds by bisection, or the caller's threshold directly.

When it applies: a core (what elimination leaves) of at most a few million atom-query
incidences, with at most a tenth of its weight in families of pairwise-disjoint queries
and a root Lagrangian bound below the families' bound (random subsets; not grids of
marginals or histogram bins, which the bound above ignores and the 0/1 program's family
rows capture: its LP bound for marginal tables is the number of tables). Exact, or an
upper bound at the deadline. Cost: exponential in the worst case; about 0.1-0.3 ms per
node.
"""

from __future__ import annotations

import math
import time

import numpy as np

from dpcurator.queries.overlap.component import Component, Solution
from dpcurator.queries.overlap.eliminate import Core, back_substitute
from dpcurator.queries.overlap.lagrangian_search import LagrangianSearch

__all__ = ["LagrangianSearch", "solve_lagrangian"]

#: The share of the time limit (and cap, in seconds) that random restarts and the root
#: multipliers may take.
_ASCENT_SHARE, _ROOT_SHARE = (0.05, 1.0), (0.1, 5.0)
#: Largest share of the core's query weight in disjoint families (two or more queries)
#: for this search: the families' rows make the 0/1 program stronger than this bound.
_FAMILY_SHARE = 0.1


def solve_lagrangian(
    comp: Component, core: Core, deadline: float, target: float | None = None
) -> Solution | None:
    """The component's optimum by Lagrangian branch and bound on ``core``: exact, or an
    upper bound at ``deadline``; None when the core is too large, has more than a tenth
    of its weight in disjoint families, or its root Lagrangian bound is not below the
    families' bound (the 0/1 program is then the better tool). With ``target``, only
    whether the optimum is at most it matters: the search may stop once that is settled
    (an upper bound at most ``target``, or a point beyond it)."""
    if _family_share(comp, core) > _FAMILY_SHARE:
        return None
    integral = bool(np.all(comp.w == np.round(comp.w)))
    search = LagrangianSearch.from_core(comp, core, integral)
    if search is None:
        return None
    start = time.monotonic()
    family = comp.bound(np.ones(len(comp.w), bool))
    x = search.coordinate_ascent(
        np.argmax(search.u, axis=1), _share(start, deadline, _ASCENT_SHARE)
    )
    best = search.value(x)
    lam, root = search.root(best, family - core.const, _share(start, deadline, _ROOT_SHARE))
    if core.const + root >= family:
        return None
    if not search.prunes(root, best):  # a better point saves nodes
        best, x = search.restarts(best, x, _share(start, deadline, _ASCENT_SHARE))
    at = None if target is None else target - core.const
    upper, best, x, exact = search.run(lam, root, best, x, deadline, at)
    assign = back_substitute(comp, core, search.atoms(x))
    got = float(comp.w[comp.covered(assign)].sum())
    total = core.const + best
    if exact and got >= total - max(comp.eps, 1e-7 * max(1.0, abs(total))):
        return Solution(got, got, assign, True)
    upper = core.const + upper
    upper = math.floor(upper + 1e-6) if integral else upper
    return Solution(got, max(min(upper, family), got), assign, False)


def _family_share(comp: Component, core: Core) -> float:
    """The share of the core queries' weight in families of two or more queries."""
    qs = np.flatnonzero(core.queries)
    total = float(comp.w[qs].sum())
    if not total:
        return 0.0
    gid = comp.families.gid[qs]
    _, inv, counts = np.unique(gid, return_inverse=True, return_counts=True)
    return float(comp.w[qs][counts[inv.ravel()] > 1].sum()) / total


def _share(start: float, deadline: float, share: tuple[float, float]) -> float:
    """When a preliminary step must stop: a share of the time limit, at most some seconds."""
    part, cap = share
    if math.isfinite(deadline):
        return start + min(part * max(deadline - start, 0.0), cap)
    return start + cap
