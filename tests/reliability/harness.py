"""The reliability ledger: every scenario counts what went in and what came out.

A scenario is an async function that drives the real bot (real DuckDB file, real channel client
against its protocol fake, real subprocesses for crashes) and returns a `Counts`. Tests assert
`lost == 0` and `leaked == 0` for each; `bench/reliability.py` runs them all and prints the table.
Register with `@scenario("telegram: SIGKILL during the reply")`; the module must be listed in
SCENARIO_MODULES so the bench finds it without importing pytest machinery.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

SCENARIO_MODULES = (
    # one line per module that registers scenarios, e.g. "tests.reliability.test_inbox"
    "tests.reliability.test_api",
    "tests.reliability.test_cli_through_gateway",
    "tests.reliability.test_prompt_secrets",
    "tests.reliability.test_robust",
    "tests.reliability.test_isolation",
    "tests.reliability.test_channels_security",
    "tests.reliability.test_telegram_crash",
    "tests.reliability.test_console_crash",
    "tests.reliability.test_ilink_crash",
    "tests.reliability.test_wechat_mp_crash",
    "tests.reliability.test_llm_faults",
    "tests.reliability.test_full_disk",
    "tests.reliability.test_delivery",
    "tests.reliability.test_recall_isolation",
    "tests.reliability.test_trust_access",
    "tests.reliability.test_pg_delivery",
)


@dataclass(frozen=True, slots=True)
class Counts:
    """What one scenario saw. `lost` = accepted but never answered or stored; `leaked` = any
    byte of one person's memory, secret or reply reaching someone it must not (or a log/prompt
    it must not)."""

    scenario: str
    messages_in: int
    answered: int
    stored: int
    lost: int
    leaked: int
    answered_twice: int = 0
    note: str = ""


Scenario = Callable[[Path], Awaitable[Counts]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    """Register a scenario under a table row name."""

    def register(fn: Scenario) -> Scenario:
        old = SCENARIOS.get(name)
        # pytest imports a test module as `test_x`, the bench as `tests.reliability.test_x`: the
        # same function from the same file is one scenario, not two.
        if old is not None and old is not fn and (old.__code__.co_filename, old.__qualname__) != (
                fn.__code__.co_filename, fn.__qualname__):
            raise ValueError(f"scenario {name!r} registered twice")
        SCENARIOS[name] = fn
        return fn

    return register


def load_all() -> dict[str, Scenario]:
    """Import every scenario module and return the registry."""
    for module in SCENARIO_MODULES:
        importlib.import_module(module)
    return SCENARIOS


def assert_safe(counts: Counts) -> None:
    """The guarantee every scenario checks."""
    assert counts.lost == 0, counts
    assert counts.leaked == 0, counts
    assert counts.answered_twice == 0, counts
