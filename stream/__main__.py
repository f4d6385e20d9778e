"""``python -m stream`` = the ``dpstream`` command."""

from stream.commands.cli import main

raise SystemExit(main())
