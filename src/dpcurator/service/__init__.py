"""The curator as an HTTP service: ``create_app(curator)`` and its limits."""

from dpcurator.service.app import create_app
from dpcurator.service.limits import Limits

__all__ = ["Limits", "create_app"]
