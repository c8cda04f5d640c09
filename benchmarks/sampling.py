"""Draws per second of dpcurator's exact samplers, side by side with OpenDP's.

Run:  .venv/bin/python benchmarks/sampling.py [--n 1000000] [--repeat 3] [--no-opendp]

For each parameter it times ``n`` draws of

* dpcurator ``discrete_laplace(scale, n)`` / ``discrete_gaussian(sigma, n)`` from the
  operating system's CSPRNG (the default, secure source), best of ``--repeat`` runs;
* the same with the seeded (insecure, PCG64) source, for reference;
* OpenDP's ``make_laplace`` / ``make_gaussian`` applied to an integer vector of length
  ``n`` (``vector_domain(atom_domain(T=int))`` with ``l1_distance``/``l2_distance``), which
  also samples the discrete Laplace / discrete Gaussian exactly, from its CSPRNG. The
  OpenDP time includes moving the vector between Python and Rust, which is part of what
  a Python caller pays; it is timed once (it is slow), after one small warm-up call.

It prints a table with the ratio dpcurator/OpenDP. Everything runs on one core
(numpy's integer operations are single-threaded).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

from dpcurator.mechanisms import SeededRandomSource, discrete_gaussian, discrete_laplace

LAPLACE_SCALES = [1, 10, 1000]
GAUSSIAN_SIGMAS = [1, 10, 1000]


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def opendp_samplers(n: int):
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space_l1 = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
    space_l2 = dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int)
    zeros = [0] * n

    def laplace(scale: float) -> Callable[[], object]:
        meas = dp.m.make_laplace(*space_l1, scale=float(scale))
        meas([0] * 10)  # warm-up
        return lambda: meas(zeros)

    def gaussian(sigma: float) -> Callable[[], object]:
        meas = dp.m.make_gaussian(*space_l2, scale=float(sigma))
        meas([0] * 10)
        return lambda: meas(zeros)

    return laplace, gaussian


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="draws per run")
    parser.add_argument("--repeat", type=int, default=3, help="dpcurator runs (best of)")
    parser.add_argument("--no-opendp", action="store_true", help="skip OpenDP (slow)")
    args = parser.parse_args()
    n = args.n

    cases: list[tuple[str, object, Callable, Callable, str]] = []
    for s in LAPLACE_SCALES:
        cases.append(("discrete Laplace", s, discrete_laplace, "laplace", f"scale={s}"))
    for s in GAUSSIAN_SIGMAS:
        cases.append(("discrete Gaussian", s, discrete_gaussian, "gaussian", f"sigma={s}"))

    od = None
    if not args.no_opendp:
        import opendp

        od = opendp_samplers(n)
        od_version = getattr(opendp, "__version__", None)
        if od_version is None:
            from importlib.metadata import version

            od_version = version("opendp")
    print(f"# {n:,} draws per run; numpy {np.__version__}; python {platform.python_version()}")
    if od is not None:
        print(f"# OpenDP {od_version}")
    header = (
        f"{'sampler':<18} {'parameter':<11} {'dpcurator/s':>13} {'seeded/s':>13}"
        f" {'OpenDP/s':>12} {'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    for name, param, fn, kind, label in cases:
        t_secure = best_time(lambda fn=fn, param=param: fn(param, n), args.repeat)
        seeded = SeededRandomSource(0)
        t_seeded = best_time(
            lambda fn=fn, param=param, seeded=seeded: fn(param, n, rng=seeded), args.repeat
        )
        rate = n / t_secure
        rate_seeded = n / t_seeded
        if od is not None:
            make = od[0] if kind == "laplace" else od[1]
            t_od = best_time(make(param), 1)
            rate_od = n / t_od
            od_col, ratio_col = f"{rate_od:12,.0f}", f"{rate / rate_od:6.1f}x"
        else:
            od_col, ratio_col = f"{'-':>12}", f"{'-':>7}"
        print(
            f"{name:<18} {label:<11} {rate:13,.0f} {rate_seeded:13,.0f} {od_col} {ratio_col}",
            flush=True,
        )


if __name__ == "__main__":
    main()
