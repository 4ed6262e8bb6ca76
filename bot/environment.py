"""The MEMGATE_* environment: which variables exist, and how a value is read.

A mistyped name (MEMGATE_LLM_MODLE) was silently ignored and a boolean that was neither true nor
false ("yesplease") silently became false; both are now one line naming the variable (and, for a
name, the closest known one). The setting variables are derived from the settings model by
`bot.config`; the others are listed here.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from bot.errors import ConfigError

PREFIX = "MEMGATE_"
# MEMGATE_* variables that are not a setting's override, and what reads them.
OTHER_VARIABLES = {
    "MEMGATE_CONFIG": "the config file to read",
    "MEMGATE_ENV_FILE": "the secrets file (env_file)",
    "MEMGATE_SYSTEMD_DIR": "where `memgate service install` writes the unit",
    "MEMGATE_API_KEY": "`memgate mcp` and `memgate chat`: the API key whose space and scope bound every call",
    "MEMGATE_SCREENSHOTS": "where the dashboard tests save screenshots",
    "MEMGATE_CHROMIUM": "the Chromium the dashboard tests drive",
}
# The test suite's own knobs (MEMGATE_TEST_HEADLESS_HOLD, ...): its subprocesses inherit them.
TEST_PREFIX = "MEMGATE_TEST_"
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def parse_bool(var: str, value: str) -> bool:
    """true/false, 1/0, yes/no, on/off (any case, spaces around ignored); anything else is an error."""
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(f"{var}={value!r} is not a boolean: use true or false (also 1/0, yes/no, on/off)")


def check_names(env: Mapping[str, str], known: Iterable[str]) -> None:
    """Every MEMGATE_* variable in `env` is a known one; the first unknown is an error naming the
    closest known name (difflib), or the list of them when none is close."""
    names = frozenset(known) | OTHER_VARIABLES.keys()
    unknown = sorted(v for v in env if v.upper().startswith(PREFIX) and v not in names
                     and not v.upper().startswith(TEST_PREFIX))
    if not unknown:
        return
    var = unknown[0]
    # Compared without the shared prefix, which would make every name look alike.
    tails = {n[len(PREFIX):]: n for n in names}
    close = [tails[t] for t in difflib.get_close_matches(var.upper()[len(PREFIX):], sorted(tails), n=1, cutoff=0.6)]
    more = f" (and {len(unknown) - 1} more unknown: {', '.join(unknown[1:4])}{'...' if len(unknown) > 4 else ''})" \
        if len(unknown) > 1 else ""
    hint = f"did you mean {close[0]}?" if close else \
        "memgate reads MEMGATE_<SECTION>_<KEY> for the keys in config.example.toml"
    raise ConfigError(f"unknown environment variable {var}: {hint}{more}")
