"""`python -m bot.cli`: the same as the `memgate` console script."""

from bot.cli.dispatch import main

raise SystemExit(main())
