"""The curator as an HTTP service: ``create_app(curator)`` and its limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpcurator import _lazy_exports

if TYPE_CHECKING:
    from dpcurator.service.app import create_app
    from dpcurator.service.limits import Limits

__all__ = ["Limits", "create_app"]

#: Where each public name lives, imported when first asked for (PEP 562): the gate
#: (:mod:`dpcurator.service.gate`), a process of its own, needs neither FastAPI nor
#: the curator.
_HOMES = {"Limits": "dpcurator.service.limits", "create_app": "dpcurator.service.app"}

__getattr__ = _lazy_exports(__name__, _HOMES)
