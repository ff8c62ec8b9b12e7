"""``python -m cluster.cli``: the ``timeshard`` command line."""

from cluster.cli import main

raise SystemExit(main())
