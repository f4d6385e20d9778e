"""``python -m stream`` = the ``dpstream`` command."""

from stream.cli import main

raise SystemExit(main())
