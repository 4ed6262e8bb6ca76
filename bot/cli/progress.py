"""The progress bar of `memgate memory export|import`, `reembed` and `migrate`, on stderr."""

from __future__ import annotations

import sys


class ProgressBar:
    """A progress bar on stderr that appears with the first progress (a refusal prints alone)."""

    def __init__(self, total: int | None = None, *, desc: str | None = None, unit: str = "mem",
                 tty_only: bool = False) -> None:
        self.total, self._bar = total, None
        self._desc, self._unit, self._tty_only = desc, unit, tty_only

    def update(self, n: int) -> None:
        """Add n done (the bar is drawn from the first call)."""
        if self._bar is None:
            from tqdm import tqdm

            # tty_only: no bar at all when stderr is not a terminal (tqdm's disable=None).
            self._bar = tqdm(total=self.total, desc=self._desc, unit=self._unit, file=sys.stderr,
                             disable=None if self._tty_only else False)
        self._bar.update(n)

    def write(self, text: str) -> None:
        """A line on stderr that does not tear the bar."""
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
