"""Consistent answers by generalised least squares: free post-processing (seed 003, Prop. 2.4).

The workload's queries cut the domain into *atoms*: on each attribute that some query
constrains, values with the same membership signature form one atom; a cell is one atom
per constrained attribute. Every query is the sum of the cells it covers (a 0/1 row of
A). Given noisy answers y with variances v, the consistent answers are A x*, where x*
minimises sum_q (A x - y)_q^2 / v_q (the weighted projection of y onto the range of A,
the best linear unbiased estimate; x itself may be negative and need not be unique).
Overlapping or nested queries then agree exactly: a total equals the sum of its
breakdowns. It reads only the released answers, never the data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import lsqr

from dpcurator.errors import InvalidParameter
from dpcurator.queries import Query

#: The most cells (atoms) and the most non-zeros of A that ``consistent`` accepts.
MAX_CELLS = 2_000_000
MAX_NONZEROS = 30_000_000


def _atoms(queries: Sequence[Query], name: str, size: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Atom id per value of one attribute, and each query's covered atoms on it."""
    member = []
    for q in queries:
        cov = q.coverage(name)
        row = np.zeros(size, bool)
        for lo, hi in cov:
            row[lo:hi] = True
        member.append(row)
    m = np.array(member)  # queries x values
    _, atom_of, counts = np.unique(m.T, axis=0, return_inverse=True, return_counts=True)
    atom_of = atom_of.ravel()
    n_atoms = len(counts)
    covered = []
    for row in m:
        a = np.zeros(n_atoms, bool)
        a[atom_of[row]] = True
        covered.append(np.flatnonzero(a))
    return atom_of, covered


def cell_count(queries: Sequence[Query]) -> int:
    """How many cells (atoms) the workload cuts the domain into."""
    qs = [q for q in queries if not q.is_empty]
    if not qs:
        return 0
    schema = qs[0].schema
    names = sorted({n for q in qs for n in q.attributes}, key=schema.index)
    total = 1
    for n in names:
        atom_of, _ = _atoms(qs, n, schema.attribute(n).size)
        total *= int(atom_of.max()) + 1
    return total


def cells_matrix(queries: Sequence[Query]) -> tuple[list[int], sparse.csr_matrix | None]:
    """The 0/1 matrix (non-empty queries x cells) and the non-empty queries' indices.

    Raises :class:`InvalidParameter` (before anything is released, if called first) when
    the atom space is too large."""
    qs = list(queries)
    live = [i for i, q in enumerate(qs) if not q.is_empty]  # empty queries: exactly 0
    if not live:
        return live, None
    lq = [qs[i] for i in live]
    schema = lq[0].schema
    names = sorted({n for q in lq for n in q.attributes}, key=schema.index)
    per_attr = []
    shape = []
    for n in names:
        size = schema.attribute(n).size
        if size > 10_000_000:
            raise InvalidParameter(f"consistent: attribute {n!r} has too many values ({size})")
        atom_of, covered = _atoms(lq, n, size)
        per_attr.append(covered)
        shape.append(int(atom_of.max()) + 1)
    cells = int(np.prod(shape, dtype=object)) if shape else 1
    if cells > MAX_CELLS:
        raise InvalidParameter(
            f"--postprocess consistent: the workload's queries cut the domain into {cells:,} "
            f"cells, more than {MAX_CELLS:,}; use fewer or coarser queries, or another option"
        )
    nnz = 0
    for k in range(len(lq)):
        c = 1
        for j in range(len(names)):
            c *= len(per_attr[j][k])
        nnz += c
    if nnz > MAX_NONZEROS:
        raise InvalidParameter(
            f"--postprocess consistent: the least-squares system would have {nnz:,} non-zeros, "
            f"more than {MAX_NONZEROS:,}; use fewer or coarser queries, or another option"
        )
    rows, cols = [], []
    for k in range(len(lq)):
        if names:
            grids = np.meshgrid(*[per_attr[j][k] for j in range(len(names))], indexing="ij")
            flat = np.ravel_multi_index([g.ravel() for g in grids], shape)
        else:
            flat = np.zeros(1, np.int64)
        rows.append(np.full(len(flat), k))
        cols.append(flat)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    return live, sparse.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(lq), cells))


def consistent(
    queries: Sequence[Query],
    values: Sequence[float],
    variances: Sequence[float],
    system: tuple[list[int], sparse.csr_matrix | None] | None = None,
) -> np.ndarray:
    """The least-squares consistent answers (floats), one per query.

    ``system`` is :func:`cells_matrix` of the queries, if already built."""
    qs = list(queries)
    y = np.asarray(values, float)
    v = np.asarray(variances, float)
    if len(qs) != len(y) or len(y) != len(v):
        raise InvalidParameter("consistent: one value and one variance per query")
    if not np.all(v > 0):
        raise InvalidParameter("consistent: variances must be positive")
    live, A = cells_matrix(qs) if system is None else system
    out = np.zeros(len(qs))
    if A is None:
        return out
    s = 1.0 / np.sqrt(v[live])
    Aw = sparse.diags(s) @ A
    sol = lsqr(Aw, y[live] * s, atol=1e-14, btol=1e-14, iter_lim=max(10_000, 4 * len(live)))
    out[live] = A @ sol[0]
    return out
