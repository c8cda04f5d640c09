"""``python -m dpcurator.cli``: the same as the ``dpcurator`` script."""

from dpcurator.cli import main

raise SystemExit(main())
