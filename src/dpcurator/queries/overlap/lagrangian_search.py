"""Branch and bound over attributes with the Lagrangian bound, for cores without structure.

Depth-first search fixes one attribute at a time (most query weight first). The
children of a node are bounded together, vectorised over the atoms: fixing x_b = a
removes the queries that miss a, settles those with nothing else undecided, and moves
lam_{q,b} of the survivors onto their other undecided attributes (keeping sum = w_q),
so the parent's multipliers stay feasible and are re-optimised for a few steps only
near the root (the bound: :mod:`dpcurator.queries.overlap.lagrangian_bound`). With one
attribute left the bound is the exact value.

A starting point comes from coordinate ascent (each attribute in turn takes its best
atom given the others) from the best unary atoms and a few random restarts: on
random-subset workloads it usually is the optimum, and the search only has to prove it.
Under a time limit the search first tries to prove the best point optimal; if that does
not finish, it certifies thresholds T ("nothing exceeds T") by bisection between the best
point and the smallest bound proved so far, each run pruning every node whose bound is
at most T. A caller that only needs "at most T?" gives T: the search then proves that
threshold directly (or finds a point beyond it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dpcurator.queries.overlap.lagrangian_bound import LagrangianBound

#: Subgradient steps at the nodes of depth < _OPT_DEPTH.
_NODE_STEPS, _OPT_DEPTH = 10, 3
#: Random restarts of coordinate ascent, stopping after _STALE in a row find nothing
#: better.
_RESTARTS, _STALE = 30, 8
#: Share of the remaining time for the first attempt at an exact answer.
_EXACT_SHARE = 0.3


@dataclass
class _Node:
    """A node of the search: alive queries, undecided attributes, multipliers per
    (query, attribute) pair, settled weight, attribute scores and the atoms fixed."""

    depth: int
    alive: np.ndarray
    und: np.ndarray
    lam: np.ndarray
    sat: float
    scores: np.ndarray | None
    x: np.ndarray


@dataclass
class _Children:
    """What the children of a node share: the branching attribute, the queries on it,
    their other open pairs and the multipliers moved onto them, the atoms killing each
    query, the settled weights and the changed score rows."""

    node: _Node
    b: int
    rel: np.ndarray
    others: np.ndarray
    r_of: np.ndarray
    moved: np.ndarray
    kills: np.ndarray
    sat: np.ndarray
    touched: np.ndarray
    rows: np.ndarray  # (atoms of b, len(touched), atoms)
    pq: np.ndarray
    rel_q: np.ndarray

    def child(self, v: int) -> _Node:
        parent = self.node
        alive = parent.alive.copy()
        alive[self.rel_q[self.kills[v]]] = False
        lam = parent.lam.copy()
        keep = ~self.kills[v][self.r_of]
        lam[self.others[keep]] += self.moved[keep]
        lam[self.rel] = 0.0
        lam[~alive[self.pq]] = 0.0
        und = parent.und.copy()
        und[self.b] = False
        assert parent.scores is not None
        scores = parent.scores.copy()
        scores[self.touched] = self.rows[v]
        x = parent.x.copy()
        x[self.b] = v
        return _Node(parent.depth + 1, alive, und, lam, float(self.sat[v]), scores, x)


class LagrangianSearch(LagrangianBound):
    """The search over one core (see the module docstring)."""

    def value(self, x: np.ndarray) -> float:
        """The objective at the point ``x`` (an atom per attribute)."""
        ok = self.member[np.arange(len(self.pq)), x[self.pa]]
        bad = np.bincount(self.pq[~ok], minlength=self.nq)
        return float(self.u[np.arange(self.na), x].sum() + self.w[bad == 0].sum())

    def coordinate_ascent(self, x: np.ndarray, stop: float = math.inf) -> np.ndarray:
        """Each attribute in turn takes its best atom given the others, until none moves
        (or ``stop``: every point is a valid start)."""
        x = x.copy()
        pairs = np.arange(len(self.pq))
        by_attr = [np.flatnonzero(self.pa == j) for j in range(self.na)]
        moved = True
        while moved and time.monotonic() < stop:
            moved = False
            for j in range(self.na):
                ok = self.member[pairs, x[self.pa]]
                bad = np.bincount(self.pq[~ok], minlength=self.nq)
                ps = by_attr[j]
                free = bad[self.pq[ps]] - (~ok[ps]) == 0  # satisfied elsewhere
                score = self.u[j] + (self.w[self.pq[ps]] * free) @ self.mf[ps]
                v = int(np.argmax(score))
                if score[v] > score[x[j]] + self.pad:
                    x[j] = v
                    moved = True
        return x

    def restarts(self, best: float, x: np.ndarray, stop: float) -> tuple[float, np.ndarray]:
        """The best of ``x`` and coordinate ascent from a few random points (always the
        same ones, so that a run is reproducible), until ``stop``."""
        rng = np.random.default_rng(0)
        stale = 0
        for _ in range(_RESTARTS):
            if time.monotonic() > stop or stale >= _STALE:
                break
            y = rng.random(self.na) * self.sizes
            y = self.coordinate_ascent(y.astype(np.int64), stop)
            v = self.value(y)
            stale = stale + 1 if v <= best + self.pad else 0
            if v > best:
                best, x = v, y
        return best, x

    def _children(self, node: _Node, b: int, open_: np.ndarray) -> tuple[np.ndarray, _Children]:
        """The bounds of the children x_b = a of ``node``, vectorised over the atoms a."""
        nq, nv = self.nq, self.nv
        pq, pa, w = self.pq, self.pa, self.w
        assert node.scores is not None
        rel = np.flatnonzero(open_ & (pa == b))  # the open pair on b of each query
        rel_q = pq[rel]
        slot = np.full(nq, -1, np.int64)
        slot[rel_q] = np.arange(len(rel))
        others = np.flatnonzero(open_ & (pa != b) & (slot[pq] >= 0))
        r_of = slot[pq[others]]
        lo = node.lam[others]
        tot = np.bincount(r_of, weights=lo, minlength=len(rel))[r_of]
        cnt = np.bincount(r_of, minlength=len(rel))
        share = np.where(tot > 0, lo / np.where(tot > 0, tot, 1.0), 1.0 / np.maximum(cnt[r_of], 1))
        moved = node.lam[rel][r_of] * share  # lam_{q,b} spread over q's other open pairs
        kills = ~self.member[rel].T  # (atoms, len(rel)): atom a misses the query
        live = 1.0 - kills
        settled = w[rel_q] * (cnt == 0)
        sat = node.sat + self.u[b] + live @ settled
        touched, t_of = np.unique(pa[others], return_inverse=True)
        nt = len(touched)
        rows = np.broadcast_to(node.scores[touched], (nv, nt, nv)).copy()
        if len(others):
            # a surviving query moves lam_{q,b} in, a killed one takes all its lam out
            cols = t_of[:, None] * nv + np.arange(nv)[None, :]
            gain = (moved[:, None] * self.mf[others]).ravel()
            delta = np.zeros((len(others), nt * nv))
            np.put_along_axis(delta, cols, (-lo - moved)[:, None] * self.mf[others], axis=1)
            base = np.bincount(cols.ravel(), gain, nt * nv)
            rows += (base[None, :] + kills[:, r_of].astype(np.float64) @ delta).reshape(nv, nt, nv)
        und = node.und.copy()
        und[b] = False
        best_rest = node.scores.max(axis=1)
        still = und.copy()
        still[touched] = False
        bounds = sat + float(best_rest[still].sum())
        in_und = und[touched]
        if in_und.any():
            bounds = bounds + rows[:, in_und, :].max(axis=2).sum(axis=1)
        bounds[self.sizes[b] :] = -math.inf
        kids = _Children(node, b, rel, others, r_of, moved, kills, sat, touched, rows, pq, rel_q)
        return bounds, kids

    # ------------------------------------------------------------------ search

    def search(
        self, lam: np.ndarray, target: float, best: float, x: np.ndarray, deadline: float
    ) -> tuple[float, np.ndarray, bool, float]:
        """Depth-first search proving that no point exceeds max(target, best), or
        finding one that does. Returns (best, its point, finished, largest bound of the
        nodes left open)."""
        na, pq, pa = self.na, self.pq, self.pa
        threshold = max(target, best)
        root = _Node(0, np.ones(self.nq, bool), np.ones(na, bool), lam, 0.0, None, x * 0)
        stack: list[tuple[float, _Children | _Node, int]] = [(math.inf, root, -1)]
        while stack:
            bound, parent, v = stack.pop()
            if self.prunes(bound, threshold):
                continue
            self.nodes += 1
            if self.nodes % 16 == 0 and time.monotonic() > deadline:
                return best, x, False, max(bound, max((s[0] for s in stack), default=bound))
            node = parent.child(v) if isinstance(parent, _Children) else parent
            open_ = node.alive[pq] & node.und[pa]
            if node.depth < _OPT_DEPTH:
                node.lam, got = self._optimise(
                    node.lam, open_, node.und, node.sat, threshold, _NODE_STEPS
                )
                node.scores = None
                if self.prunes(got, threshold):
                    continue
            if node.scores is None:
                node.scores = self.scores(node.lam)
            cand = np.flatnonzero(node.und)
            b = int(cand[np.argmin(self.rank[cand])])
            bounds, kids = self._children(node, b, open_)
            if len(cand) == 1:  # the bounds are the children's values
                a = int(np.argmax(bounds))
                if not self.prunes(bounds[a], threshold):
                    y = node.x.copy()
                    y[b] = a
                    val = self.value(y)
                    if val > best:
                        best, x = val, y
                        threshold = max(threshold, best)
                continue
            for a in np.argsort(bounds, kind="stable").tolist():  # best child on top
                if not self.prunes(bounds[a], threshold):
                    stack.append((float(bounds[a]), kids, a))
        return best, x, True, -math.inf

    def run(
        self,
        lam: np.ndarray,
        root: float,
        best: float,
        x: np.ndarray,
        deadline: float,
        target: float | None = None,
    ) -> tuple[float, float, np.ndarray, bool]:
        """Prove the best point optimal, or the smallest threshold the time allows; with
        ``target``, only whether nothing exceeds it (a bound at most ``target`` or a point
        beyond it settles that). Returns (upper bound, best value, its point, exact)."""
        upper = self.certified(math.floor(root + self.pad)) if self.integral else root + self.pad
        if self.prunes(root, best):
            return upper, best, x, True
        if target is not None:
            if self.prunes(root, target) or best > target + self.pad:
                return upper, best, x, False
            best, x, done, left = self.search(lam, target, best, x, deadline)
            if done:  # nothing exceeds max(target, best), which best reached if above
                if best > target:
                    return self.certified(best), best, x, True
                return min(upper, self.certified(target)), best, x, False
            if math.isfinite(left):
                left = math.floor(left + self.pad) if self.integral else left + self.pad
                upper = min(upper, max(left, self.certified(max(target, best))))
            return max(upper, best), best, x, False
        now = time.monotonic()
        first = now + _EXACT_SHARE * (deadline - now) if math.isfinite(deadline) else deadline
        best, x, done, left = self.search(lam, best, best, x, first)
        if done:
            return self.certified(best), best, x, True
        # every node left open is bounded by ``left``; the others were pruned at best
        if math.isfinite(left):
            left = math.floor(left + self.pad) if self.integral else left + self.pad
            upper = min(upper, max(left, self.certified(best)))
        lo = best
        while time.monotonic() < deadline:
            mid: float
            if self.integral:
                if upper - lo < 1:
                    break
                mid = math.floor((lo + upper) / 2)
            else:
                if upper - lo <= 2 * self.eps + self.pad:
                    break
                mid = (lo + upper) / 2
            now = time.monotonic()
            stop = now + (deadline - now) / 2 if upper - lo > 2 else deadline
            best, x, done, left = self.search(lam, mid, best, x, stop)
            if done:
                upper = min(upper, self.certified(max(mid, best)))
                if best >= upper - (0 if self.integral else self.eps):
                    return best, best, x, True
            else:
                lo = max(lo, mid)
            lo = max(lo, best)
        return max(upper, best), best, x, False
