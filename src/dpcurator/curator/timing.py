"""The request deadline around a curator method (see :mod:`dpcurator.deadlines`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from dpcurator import deadlines

P = ParamSpec("P")
R = TypeVar("R")


def timed(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """Run a request under the curator's request deadline (``request_time_limit``): its
    parsing, bounds, turn at the solver and exact checks, up to its charge; and in a
    turn (:mod:`dpcurator.curator.turns`)."""

    @functools.wraps(method)
    def run(self: Any, *args: P.args, **kw: P.kwargs) -> R:
        with self._turns.turn(), deadlines.within(self._deadline(), self._stopping):
            return method(self, *args, **kw)

    return run
