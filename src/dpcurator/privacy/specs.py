"""The mechanism spec language of ``dpcurator account``: ``KIND:PARAMS[xCOUNT]``.

Parsing text into events is pure (no I/O), so it lives beside the events it builds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dpcurator.errors import InvalidParameter, SpecError
from dpcurator.privacy._rigor import Written
from dpcurator.privacy.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    Event,
    Gaussian,
    Guaranteed,
    Laplace,
)
from dpcurator.privacy.guarantees import GDP, ZCDP, ApproxDP, PureDP

#: kind -> (parameter names, builder from (params, count))
KINDS: dict[str, tuple[tuple[str, ...], object]] = {
    "pure": (("epsilon",), lambda p, c: Guaranteed(PureDP(p[0]), c)),
    "approx": (("epsilon", "delta"), lambda p, c: Guaranteed(ApproxDP(p[0], p[1]), c)),
    "zcdp": (("rho",), lambda p, c: Guaranteed(ZCDP(p[0]), c)),
    "gdp": (("mu",), lambda p, c: Guaranteed(GDP(p[0]), c)),
    "laplace": (("scale",), lambda p, c: Laplace(p[0], c)),
    "dlaplace": (("scale",), lambda p, c: DiscreteLaplace(p[0], c)),
    "gaussian": (("sigma",), lambda p, c: Gaussian(p[0], c)),
    "dgaussian": (("sigma",), lambda p, c: DiscreteGaussian(p[0], c)),
}

_SPEC = re.compile(r"^(?P<kind>[A-Za-z]+):(?P<params>[^x]*?)(?:x(?P<count>[^x]*))?$")


@dataclass(frozen=True)
class Spec:
    """A parsed spec: its text without the count, the count, and the event."""

    text: str
    count: int
    event: Event


def parse_spec(text: str) -> Spec:
    """Parse ``KIND:PARAMS[xCOUNT]``; raise :class:`SpecError` with one line otherwise."""
    m = _SPEC.match(text.strip())
    if m is None:
        raise SpecError(f"malformed spec {text!r}: expected KIND:PARAMS[xCOUNT], e.g. pure:0.1x100")
    kind = m["kind"].lower()
    if kind not in KINDS:
        raise SpecError(f"unknown kind {m['kind']!r} in {text!r}; known: {', '.join(KINDS)}")
    names, build = KINDS[kind]
    raw = [p.strip() for p in m["params"].split(",")] if m["params"] else []
    if len(raw) != len(names):
        raise SpecError(
            f"{kind} takes {len(names)} parameter(s) ({', '.join(names)}), got {len(raw)} in {text!r}"
        )
    params = []
    for name, r in zip(names, raw, strict=True):
        try:
            value: float = float(r)
        except ValueError:
            raise SpecError(f"{name} must be a number in {text!r}, got {r!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise SpecError(f"{name} must be a finite number > 0 in {text!r}, got {r!r}")
        try:
            value = Written(r)  # the decimal as written: read exactly (see _rigor)
        except ValueError:
            raise SpecError(
                f"{name} has too many digits or too large an exponent in {text!r}"
            ) from None
        if name == "delta" and value >= 1:
            raise SpecError(f"delta must satisfy 0 < delta < 1 in {text!r}, got {r!r}")
        params.append(value)
    count = 1
    if m["count"] is not None:
        if not re.fullmatch(r"\d+", m["count"]) or int(m["count"]) < 1:
            raise SpecError(f"count must be an integer >= 1 in {text!r}, got {m['count']!r}")
        count = int(m["count"])
    try:
        event = build(params, count)  # type: ignore[operator]
    except InvalidParameter as err:
        raise SpecError(f"{text!r}: {err}") from None
    body = text.strip() if m["count"] is None else text.strip()[: m.start("count") - 1]
    return Spec(body, count, event)
