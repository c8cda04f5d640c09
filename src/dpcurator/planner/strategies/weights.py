"""Weighted measurements: rows that are integer combinations of a table's cell counts.

A measured table's rows need not be its cells. A *weighted* measurement releases
y_r = sum_c k_rc n_c + Z_r for integer weights k_rc over disjoint cells c, each row with
independent exact noise Z_r of one kind (discrete Laplace or discrete Gaussian, the
noise of a count at a *unit* cost u). One row changes by |k_rc| when a row of the data
at a point of cell c is added or removed, so, for an integer shift, the row's loss at
that point is exactly |k_rc| u under pure DP (the discrete Laplace's likelihood ratio)
and k_rc^2 u under zCDP (the discrete Gaussian's Renyi divergence, Canonne, Kamath &
Steinke 2020, Prop. 5); summed over the independent rows (basic composition, Dwork &
Roth 2014 Thm 3.16; zCDP composition, Bun & Steinke 2016 Lemma 1.7) the measurement
costs a point of cell c

    F_c u,   F_c = sum_r |k_rc| (epsilon)   or   sum_r k_rc^2 (rho, and mu^2 for GDP),

the column norm of c. A measurement is therefore a set of (cells, cost) *pieces*, one
per distinct F_c, which the curator's per-point filter charges like any other region
(docs/design.md, *Weighted measurements*). A counting table is the case of one row per
cell with weight 1 (F_c = 1).

The weights are integers so that the measured value is an integer and the noise exact;
real weights (HDMM's p-Identity, the residual bases of ResidualPlanner) are scaled and
rounded by the strategies that use them, and the errors reported are those of the
integer weights as measured.

The weights of every strategy here are Kronecker products of per-attribute matrices
(McKenna, Miklau, Hay & Machanavajjhala, VLDB 2018, Sec. 5), so they are kept as their
factors: nothing of the table's size squared is built.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter, TooLarge

#: The largest column norm a measurement may have (its products stay exact in int64).
NORM_LIMIT = 2**62


def _order(currency: str) -> int:
    """1 for pure DP (the loss is linear in the shift), 2 for zCDP and GDP (quadratic)."""
    if currency not in ("epsilon", "rho", "mu"):
        raise InvalidParameter(f"unknown currency {currency!r}")
    return 1 if currency == "epsilon" else 2


@dataclass(frozen=True)
class Centred:
    """The factor n I - J over n cells, kept implicit (it is dense: n^2 entries). See
    :func:`centred`."""

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 2:
            raise InvalidParameter("a centred factor needs n >= 2 cells")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    def column_norms(self, order: int) -> np.ndarray:
        """Per cell: sum_r |k_rc| = 2 (n - 1), or sum_r k_rc^2 = n (n - 1)."""
        n = self.n
        return np.full(n, 2 * (n - 1) if order == 1 else n * (n - 1), np.int64)

    def max_abs(self) -> int:
        return self.n - 1

    def apply(self, y: np.ndarray, axis: int) -> np.ndarray:
        return self.n * y - y.sum(axis=axis, keepdims=True)

    def dense(self) -> np.ndarray:
        return centred(self.n)

    def to_json(self) -> object:
        return {"centred": self.n}


def _dense(f: object) -> np.ndarray:
    a = np.asarray(f)
    if a.ndim != 2 or a.size == 0 or a.dtype.kind not in "iu":
        raise InvalidParameter("each weight factor must be a non-empty integer matrix")
    if a.size and int(np.abs(a.astype(object)).max()) > NORM_LIMIT:
        raise InvalidParameter("a weight factor's entries must be below 2^62")
    a = a.astype(np.int64)
    if not np.any(a, axis=0).all():
        raise InvalidParameter("every cell must have a non-zero weight in some row")
    a.setflags(write=False)
    return a


Factor = np.ndarray | Centred


@dataclass(frozen=True, eq=False)
class KroneckerWeights:
    """Integer row weights over a table's cells: the Kronecker product of ``factors``.

    Factor i is an integer matrix (rows_i x cells_i), or :class:`Centred` (n I - J, kept
    implicit); the table's cells are the product of the factors' columns in row-major
    order (the first factor's axis slowest), and so are its rows: row (r_1, ..., r_d)
    has weight prod_i factor_i[r_i, c_i] on cell (c_1, ..., c_d)."""

    factors: tuple[Factor, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.factors, tuple) or not self.factors:
            raise InvalidParameter("a weighted measurement needs a tuple of factors")
        fs = tuple(f if isinstance(f, Centred) else _dense(f) for f in self.factors)
        object.__setattr__(self, "factors", fs)

    @classmethod
    def from_json(cls, d: object) -> KroneckerWeights:
        """The weights as :meth:`to_json` wrote them."""
        if not isinstance(d, dict) or not isinstance(d.get("kronecker"), list):
            raise InvalidParameter('weights are {"kronecker": [factor, ...]}')
        fs: list[Factor] = []
        for f in d["kronecker"]:
            if isinstance(f, dict) and set(f) == {"centred"}:
                fs.append(Centred(f["centred"]))
            elif isinstance(f, list) and all(
                isinstance(r, list) and all(type(v) is int for v in r) for r in f
            ):
                fs.append(np.array(f, dtype=np.int64) if f else np.zeros((0, 0), np.int64))
            else:
                raise InvalidParameter('a factor is a list of integer rows or {"centred": n}')
        return cls(tuple(fs))

    @property
    def shape(self) -> tuple[int, ...]:
        """Cells per axis."""
        return tuple(f.shape[1] for f in self.factors)

    @property
    def rows(self) -> int:
        return math.prod(f.shape[0] for f in self.factors)

    @property
    def cells(self) -> int:
        return math.prod(self.shape)

    def column_factor(self, currency: str) -> np.ndarray:
        """F_c per cell (row-major): each cell's cost in units of the unit cost."""
        p = _order(currency)
        cols = []
        for f in self.factors:
            if isinstance(f, Centred):
                cols.append(f.column_norms(p).astype(object))
            else:
                a = np.abs(f).astype(object)  # Python integers: no square overflows
                cols.append((a if p == 1 else a * a).sum(axis=0))
        if math.prod(int(c.max()) for c in cols) > NORM_LIMIT:
            raise TooLarge("the weights' column norms would exceed 2^62")
        cols = [c.astype(np.int64) for c in cols]
        out = np.ones(1, np.int64)
        for col in cols:
            out = np.multiply.outer(out, col).ravel()
        return out

    def apply(self, counts: Any) -> np.ndarray:
        """The exact rows (row-major) from the cells' exact counts (row-major), as Python
        integers (no bound on the counts is assumed: an overflow cannot happen, so how
        large they are shows nowhere)."""
        x = np.asarray(counts)
        if x.shape != (self.cells,) or x.dtype.kind not in "iuO":
            raise InvalidParameter(f"one integer count per cell ({self.cells}) is needed")
        y = x.astype(object).reshape(self.shape)
        for axis, f in enumerate(self.factors):
            if isinstance(f, Centred):
                y = f.apply(y, axis)
            else:
                y = np.moveaxis(np.tensordot(f.astype(object), y, axes=([1], [axis])), 0, axis)
        return np.ascontiguousarray(y).reshape(-1)

    def dense(self) -> np.ndarray:
        """The whole (rows x cells) matrix, for small tables and checks."""
        out = np.ones((1, 1), np.int64)
        for f in self.factors:
            out = np.kron(out, f.dense() if isinstance(f, Centred) else f)
        return out

    def to_json(self) -> dict[str, Any]:
        """The weights as recorded in the ledger (enough to re-derive the estimates)."""
        return {
            "kronecker": [
                f.to_json() if isinstance(f, Centred) else f.tolist() for f in self.factors
            ]
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KroneckerWeights) or len(self.factors) != len(other.factors):
            return False
        return all(
            a == b if isinstance(a, Centred) or isinstance(b, Centred) else np.array_equal(a, b)
            for a, b in zip(self.factors, other.factors, strict=True)
        )

    def __hash__(self) -> int:
        return hash(tuple(f if isinstance(f, Centred) else f.tobytes() for f in self.factors))


def centred(n: int) -> np.ndarray:
    """n I - J: the residual (all-ones complement) of one attribute of n atoms as an
    integer tight frame. Its Gram matrix is n^2 (I - J/n), n^2 times the projection on
    the complement; its columns have squared norm n (n - 1), so per unit of zCDP it
    informs the residual exactly as much as an orthonormal basis (whose columns have
    squared norm (n - 1)/n): the residual measurement of Xiao, Wang, Ding & Kifer
    (NeurIPS 2023), with integer weights. Dense: :class:`Centred` keeps it implicit."""
    return n * np.eye(n, dtype=np.int64) - np.ones((n, n), np.int64)


__all__ = ["NORM_LIMIT", "Centred", "KroneckerWeights", "centred"]
