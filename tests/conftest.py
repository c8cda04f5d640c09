"""The test suite's hypothesis profiles.

``ci`` (the default, what ``.ci/run`` and the README's test command use) draws a fixed,
derandomized set of examples, keeps no example database and sets no deadline: a run
never depends on which random examples it draws, nor on how loaded the machine is.
``HYPOTHESIS_PROFILE=explore`` draws new random examples on every run (and remembers
the failing ones), to look for bugs the fixed set misses; a failure it finds becomes a
deterministic test.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
