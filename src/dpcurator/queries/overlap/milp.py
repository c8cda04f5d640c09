"""The 0/1 program on a core, solved by HiGHS (:func:`scipy.optimize.milp`).

Variables: z_{j,a} = "the point takes atom a on attribute j", with sum_a z_{j,a} = 1 and
the unary potentials of variable elimination as objective coefficients (single-attribute
queries need no variable); y_q in {0, 1} for each multi-attribute query, with
y_q <= sum_{a in C_{q,j}} z_{j,a} for each attribute j it constrains (or the equivalent
complement form, whichever is shorter). For a family of pairwise-disjoint queries (a
grid) the rows are aggregated, sum_{q in F, C_{q,j} = C} y_q <= sum_{a in C} z_{j,a},
which is valid (at most one of them covers a point) and much tighter: its LP bound for
marginal tables is the number of tables. The solution is re-evaluated exactly.

When it applies: any core (what elimination leaves), after branch and bound ran out of
its slice or when elimination folded part of the component. Exact when HiGHS proves
optimality; an **upper bound** otherwise (its dual bound, capped by the disjoint-family
bound, plus the exact eliminated part). Cost: exponential in the worst case; the time
limit is what remains of the caller's.

Deciding a threshold instead (``decide_at=T``): the caller only needs to know whether
the optimum exceeds T. If the disjoint-family bound is at most T, that is settled
without HiGHS. Otherwise the program runs as above, and at the deadline the caller
reads both ends: a dual bound <= T settles "at most T", and HiGHS's best point, which
is re-evaluated exactly, settles "more than T" when it exceeds T (on family-heavy cores
HiGHS usually has the optimum long before it has proved it).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse

from dpcurator.queries.overlap.component import Component, Solution
from dpcurator.queries.overlap.eliminate import Core, back_substitute


def solve_milp(
    comp: Component,
    core: Core,
    time_limit: float | None,
    integral: bool,
    decide_at: float | None = None,
) -> Solution:
    """The component's optimum through the 0/1 program on ``core`` (exact, or an upper
    bound when ``time_limit`` seconds stop HiGHS). With ``decide_at``, a disjoint-family
    bound at most that value is returned without running HiGHS (``exact`` False unless
    the starting point reaches it)."""
    family = comp.bound(np.ones(len(comp.w), bool))
    if decide_at is not None and family <= decide_at:  # settled: nothing exceeds it
        start = {int(ai): int(np.argmax(core.unary[int(ai)])) for ai in core.attrs}
        assign = back_substitute(comp, core, start)
        got = float(comp.w[comp.covered(assign)].sum())
        up = math.floor(family + 1e-6) if integral else family
        return Solution(got, max(up, got), assign, got >= family)
    up, atoms, ok = milp_core(comp, core, time_limit)
    assign = back_substitute(comp, core, atoms)
    up = min(up + core.const, family)
    if integral:
        up = math.floor(up + 1e-6)
    got = float(comp.w[comp.covered(assign)].sum())
    # Integer weights (below 2^53, so every sum above is exact) settle only when the point
    # found reaches the floored dual bound itself: a relative slack would call a point
    # exact that lies below the optimum by up to 1e-7 of it, the unsafe direction.
    slack = 0.0 if integral else max(comp.eps, 1e-7 * max(1.0, up))
    if ok and got >= up - slack:
        return Solution(got, got, assign, True)
    return Solution(got, max(up, got), assign, False)


def milp_core(
    comp: Component, core: Core, time_limit: float | None
) -> tuple[float, dict[int, int], bool]:
    """Solve the 0/1 program on the core. Returns (upper bound of the core objective,
    atom per core attribute, solved to optimality)."""
    attrs = comp.attrs
    core_attrs = [int(a) for a in core.attrs]
    offsets = {}
    nz = 0
    for ai in core_attrs:
        offsets[ai] = nz
        nz += len(attrs[ai].cover)
    qlist = np.flatnonzero(core.queries)
    nvar = nz + len(qlist)
    c = np.zeros(nvar)
    for ai in core_attrs:
        c[offsets[ai] : offsets[ai] + len(attrs[ai].cover)] = -core.unary[ai]
    c[nz:] = -comp.w[qlist]
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lb: list[float] = []
    ub: list[float] = []

    def add(cs: np.ndarray, vs: np.ndarray, lo: float, hi: float) -> None:
        rows.append(np.full(len(cs), len(lb), np.int64))
        cols.append(np.asarray(cs, np.int64))
        vals.append(np.asarray(vs, np.float64))
        lb.append(lo)
        ub.append(hi)

    for ai in core_attrs:  # each attribute takes exactly one atom
        n = len(attrs[ai].cover)
        add(offsets[ai] + np.arange(n), np.ones(n), 1.0, 1.0)
    gid = comp.families.gid
    ypos = np.full(len(comp.w), -1, np.int64)
    ypos[qlist] = nz + np.arange(len(qlist))
    in_core = core.queries
    for ai in core_attrs:
        at = attrs[ai]
        sel = np.flatnonzero(in_core[at.qidx])
        if not len(sel):
            continue
        # aggregate the queries of one family with the same coverage on this attribute
        key = gid[at.qidx[sel]] * (len(comp.covs[ai]) + 1) + comp.cid[ai][sel]
        _, rep_, grp = np.unique(key, return_index=True, return_inverse=True)
        grp = grp.ravel()
        ng = len(rep_)
        row0 = len(lb)
        n = len(at.cover)
        cov = at.cover[:, sel[rep_]]  # atoms x groups
        n_in = cov.sum(axis=0)
        use_in = n_in <= n - n_in
        zsel = np.where(use_in[None, :], cov, ~cov)
        za, zg = np.nonzero(zsel)
        rows.append(row0 + grp)
        cols.append(ypos[at.qidx[sel]])
        vals.append(np.ones(len(sel)))
        rows.append(row0 + zg)
        cols.append(offsets[ai] + za)
        vals.append(np.where(use_in[zg], -1.0, 1.0))
        lb.extend([-np.inf] * ng)
        ub.extend(np.where(use_in, 0.0, 1.0).tolist())
    r = len(lb)
    a_mat = sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(r, nvar),
    )
    # y binary too: HiGHS then derives cuts on y (about 1.5x faster on random-subset
    # workloads than with continuous y)
    integrality = np.ones(nvar)
    options: dict[str, float | bool] = {"mip_rel_gap": 0.0, "disp": False}
    if time_limit is not None:
        options["time_limit"] = max(time_limit, 0.01)
    from scipy.optimize import LinearConstraint, milp  # when first needed: slow to import

    res = milp(
        c,
        constraints=LinearConstraint(a_mat, lb, ub),
        integrality=integrality,
        bounds=(0, 1),
        options=options,
    )
    dual = getattr(res, "mip_dual_bound", None)
    if dual is not None and np.isfinite(dual):
        upper = -float(dual)
    else:
        upper = float(sum(u.max() for u in core.unary if len(u))) + float(comp.w.sum())
    atoms: dict[int, int] = {}
    if res.x is not None:
        for ai in core_attrs:
            n = len(attrs[ai].cover)
            atoms[ai] = int(np.argmax(res.x[offsets[ai] : offsets[ai] + n]))
    else:
        atoms = {ai: int(np.argmax(core.unary[ai])) for ai in core_attrs}
    return upper, atoms, res.status == 0
