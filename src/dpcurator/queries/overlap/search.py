"""Branch and bound over attributes, bounded by the disjoint families.

Choose an atom for the attribute carrying the most alive weight, keep the queries that
survive, and split into components again as attributes get fixed (memoised: after a
branch, the sub-components it did not touch come back with the same survivors for every
sibling, which keeps tree-like workloads polynomial). Children with equal survivor sets
are merged and those whose survivors are a subset of a sibling's are skipped. A node is
pruned when its disjoint-family bound (:mod:`~dpcurator.queries.overlap.families`)
cannot beat the best point so far; one attribute left is its best atom, and at most
three attributes of single intervals go to the slab sweep.

When it applies: any component; the dispatcher gives it a short slice of the time limit,
for components that elimination leaves whole (e.g. workloads of 3-way marginals, where
the family bound at the root equals the number of tables and the first dive proves
optimality). Exact, or :class:`Timeout` (no answer) when its deadline passes. Cost:
exponential in the worst case (gamma is NP-hard to compute).
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from dpcurator.queries.overlap.atoms import best_atom, subsets
from dpcurator.queries.overlap.boxes import solve_boxes
from dpcurator.queries.overlap.component import Component, Solution


class Timeout(Exception):
    """The search ran past its deadline (its partial result is discarded)."""


def branch_and_bound(comp: Component, deadline: float) -> Solution:
    """The exact optimum of ``comp``; raises :class:`Timeout` after ``deadline``."""
    search = BranchAndBound(comp, deadline)
    value, assign = search.solve(np.ones(len(comp.w), bool), np.ones(len(comp.attr_ids), bool))
    return Solution(value, value, assign, True)


class BranchAndBound:
    """The search state: the component, its deadline, the memo of solved sub-problems."""

    def __init__(self, comp: Component, deadline: float) -> None:
        self.comp = comp
        self.deadline = deadline
        self.nodes = 0
        self.memo: dict[tuple[bytes, tuple[int, ...]], tuple[float, dict[int, int]]] = {}

    def solve(self, alive: np.ndarray, undecided: np.ndarray) -> tuple[float, dict[int, int]]:
        """Exact optimum over the undecided attributes for the alive queries."""
        self.nodes += 1
        if self.nodes % 64 == 0 and time.monotonic() > self.deadline:
            raise Timeout
        comp = self.comp
        live_pair = alive[comp.pair_q] & undecided[comp.pair_a]
        open_q = np.zeros(len(comp.w), bool)
        open_q[comp.pair_q[live_pair]] = True
        total = float(comp.w[alive & ~open_q].sum())
        assign: dict[int, int] = {}
        if not open_q.any():
            return total, assign
        for attrs, sub in _split(comp, open_q, live_pair):
            val, a = self.solve_connected(sub, attrs)
            total += val
            assign.update(a)
        return total, assign

    def solve_connected(self, alive: np.ndarray, attrs: list[int]) -> tuple[float, dict[int, int]]:
        key = (np.packbits(alive).tobytes(), tuple(attrs))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._solve_connected(alive, attrs)
        return hit

    def _solve_connected(self, alive: np.ndarray, attrs: list[int]) -> tuple[float, dict[int, int]]:
        comp = self.comp
        if len(attrs) == 1:
            at = comp.attrs[attrs[0]]
            value, atom = best_atom(at, comp.w, alive)
            return value, {attrs[0]: int(at.pos[atom])}
        if len(attrs) <= 3 and comp.single:
            box = solve_boxes(comp, alive, attrs, self.deadline)
            if not box.exact:
                raise Timeout
            return box.value, box.assign
        return self._branch(alive, attrs)

    def _branch(self, alive: np.ndarray, attrs: list[int]) -> tuple[float, dict[int, int]]:
        """Branch on the attribute carrying the most alive weight."""
        comp = self.comp
        und = np.zeros(len(comp.attr_ids), bool)
        und[attrs] = True
        live = alive[comp.pair_q]
        loads = np.bincount(
            comp.pair_a[live], weights=comp.w[comp.pair_q[live]], minlength=len(und)
        )
        ai = attrs[int(np.argmax(loads[attrs]))]
        at = comp.attrs[ai]
        kc, atom_of = _children(at.cover & alive[at.qidx][None, :])
        kids = np.repeat(alive[None, :], len(kc), axis=0)
        kids[:, at.qidx] = kc
        bounds = np.array([comp.bound(kd) for kd in kids])
        order = np.argsort(-bounds, kind="stable")
        und[ai] = False
        best, best_assign = -1.0, {}
        for i in order:
            if bounds[i] <= best + comp.eps:
                break
            val, a = self.solve(kids[i], und)
            if val > best:
                best = val
                best_assign = {**a, ai: int(at.pos[atom_of[i]])}
        return best, best_assign


def _split(
    comp: Component, open_q: np.ndarray, live_pair: np.ndarray
) -> list[tuple[list[int], np.ndarray]]:
    """The connected parts (attributes, alive queries) of the open queries."""
    pq, pa = comp.pair_q[live_pair], comp.pair_a[live_pair]
    na, nq = len(comp.attr_ids), len(comp.w)
    graph = sparse.coo_matrix((np.ones(len(pq)), (pq, nq + pa)), shape=(nq + na, nq + na))
    _, labels = connected_components(graph, directed=False)
    comp_attrs: dict[int, list[int]] = defaultdict(list)
    for ai in np.unique(pa):
        comp_attrs[int(labels[nq + ai])].append(int(ai))
    return [(attrs, open_q & (labels[:nq] == lab)) for lab, attrs in comp_attrs.items()]


def _children(kc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct survivor columns of the atoms (children differ only on the queries
    of the branching attribute), without those dominated by another child; with the
    atom each one comes from."""
    if kc.shape[1]:
        packed = np.ascontiguousarray(np.packbits(kc, axis=1))
        _, atom_of = np.unique(
            packed.view(np.dtype((np.void, packed.shape[1]))).ravel(), return_index=True
        )
    else:
        atom_of = np.zeros(1, np.int64)
    kc = kc[atom_of]
    if 1 < len(kc) <= 64:
        sub = subsets(kc)
        keep = ~(sub & ~sub.T).any(axis=1)
        kc, atom_of = kc[keep], atom_of[keep]
    return kc, atom_of
