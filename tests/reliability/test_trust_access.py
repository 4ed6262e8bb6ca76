"""Issue 22, section B ("no one in where they do not belong") as rows of the reliability ledger.

Each finding was reproduced in tests that live beside the code they cover (a second local account
reading the data folder, a forged API turn under a group's session, an injected group message in
the owner's prompt, a /link code run backwards, Chromium on another origin, ...). A row here runs
those very test functions outside pytest, with the same real parts their fixtures give them, and
counts: in = checks run, answered = passed, leaked = failed (the attack got through). The note
names the tests, so `bench/reliability.py` points at what covers each finding.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import traceback
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.reliability.harness import Counts, scenario

ROWS: dict[str, tuple[str, ...]] = {
    "trust B1: data folder 0700, files 0600 (a second local account reads nothing)": (
        "tests.bot.test_private_files::test_another_local_account_cannot_read_what_memgate_wrote",
        "tests.bot.test_private_files::test_everything_written_is_private_whatever_the_umask",
        "tests.bot.test_private_files::test_the_log_file_is_private_and_stays_so_across_rotation",
        "tests.bot.test_private_files::test_doctor_reports_files_other_accounts_can_read"),
    "trust B2: history and writes carry the space (no forged turn in a group's prompt)": (
        "tests.bot.api.test_session_space::test_a_key_cannot_write_into_another_spaces_session",),
    "trust B3: writes beyond one's space only in one's own DM, confirmed in chat": (
        "tests.bot.turn.test_approvals::test_a_recalled_group_message_cannot_make_the_owner_write_to_public",
        "tests.bot.turn.test_approvals::test_in_the_owners_dm_a_write_waits_for_their_confirm",
        "tests.bot.turn.test_approvals::test_other_peoples_words_in_the_prompt_withdraw_the_tool",
        "tests.bot.turn.test_approvals::test_a_plain_user_is_never_offered_it_and_everyone_mode_still_confirms",
        "tests.bot.turn.test_approvals::test_skill_publish_is_a_write_beyond_the_speakers_space",
        "tests.bot.turn.test_approvals::test_pending_writes_expire_and_belong_to_one_person_and_chat"),
    "trust B4: /link confirmed by both accounts, shown by platform and id": (
        "tests.bot.access.test_linking::test_a_code_run_backwards_files_nothing_in_the_attackers_memory",
        "tests.bot.access.test_linking::test_both_accounts_confirm_each_in_its_own_dm"),
    "trust B5: an import for a person writes only to that person's space": (
        "tests.bot.cli.test_import_cli::test_an_import_for_a_person_writes_only_to_that_persons_space",
        "tests.bot.api.test_import_space::test_an_operator_import_for_a_person_never_writes_to_public"),
    "trust B6: a killed gateway's token dies at restart; the CLI sends it only to its gateway": (
        "tests.bot.api.test_gateway_token::test_a_killed_gateways_token_dies_when_it_starts_again",
        "tests.bot.api.test_gateway_token::test_the_cli_sends_the_token_only_to_the_gateway_that_wrote_it"),
    "trust B7: login CSRF (Chromium on another origin), JSON and Origin required": (
        "tests.bot.api.test_login_csrf_browser::test_a_page_on_another_origin_cannot_log_the_browser_in",
        "tests.bot.api.test_request_guards::test_a_login_needs_json_and_our_origin",
        "tests.bot.api.test_request_guards::test_a_write_from_another_origin_is_refused_even_with_a_key"),
    "trust B8: logins rate-limited; 10,000 logins of one key leave the admin's session": (
        "tests.bot.api.test_request_guards::test_logins_are_rate_limited_per_key_and_per_client",
        "tests.bot.api.test_request_guards::test_the_admin_session_survives_ten_thousand_logins_with_another_key",
        "tests.bot.api.test_request_guards::test_a_keys_logins_evict_only_its_own_oldest_session"),
    "trust B9: only configured host names answered (DNS rebinding: 421)": (
        "tests.bot.api.test_request_guards::test_other_host_names_are_not_answered",
        "tests.bot.api.test_request_guards::test_the_public_url_and_allowed_hosts_are_answered",
        "tests.bot.api.test_request_guards::test_host_policy_answers_only_its_names"),
    "trust B10: nested JSON is a 400 with the JSON body on every route": (
        "tests.bot.api.test_request_guards::test_nested_json_is_a_400_on_every_route",
        "tests.bot.api.test_request_guards::test_a_deep_line_in_an_admin_import_is_a_bad_line_not_a_crash",
        "tests.bot.api.test_request_guards::test_json_depth_is_the_nesting_of_arrays_and_objects"),
    "trust B-also: no-store, import job ids, Secure cookie behind TLS": (
        "tests.bot.api.test_request_guards::test_api_answers_are_never_cached",
        "tests.bot.api.test_import_space::test_an_import_jobs_memory_ids_are_the_ids_stored_in_this_space",
        "tests.bot.api.test_request_guards::test_the_cookie_is_secure_behind_a_tls_proxy"),
}

_embedder = None


def _shared_embedder():
    global _embedder
    if _embedder is None:
        from memory.embed import LocalE5Embedder

        _embedder = LocalE5Embedder()
    return _embedder


def function_of(ref: str) -> Callable:
    """The test function a "module::name" reference names."""
    module, _, name = ref.partition("::")
    return getattr(importlib.import_module(module), name)


async def _fixtures(names: list[str], tmp: Path, stack: AsyncExitStack) -> dict[str, object]:
    """The pytest fixtures these tests ask for, built the same way (tests/conftest.py and friends)."""
    from bot.access.schema import ACCESS_MIGRATIONS
    from bot.access.linking import LINKING_MIGRATIONS
    from memory.store.connection import Store
    from tests.bot.api.conftest import serve
    from tests.bot.turn.test_approvals import bot_runner
    from tests.fakes.clock import FakeClock
    from tests.fakes.llm_server import FakeLLM

    tmp.mkdir(parents=True, exist_ok=True)
    have: dict[str, object] = {"tmp_path": tmp, "api_store_url": ""}
    lazy = {
        "embedder": lambda: _shared_embedder(),
        "clock": lambda: FakeClock(),
    }

    async def get(name: str) -> object:
        if name in have:
            return have[name]
        if name in lazy:
            have[name] = lazy[name]()
        elif name == "fake_llm":
            have[name] = await stack.enter_async_context(FakeLLM())
        elif name == "api":
            have[name] = await stack.enter_async_context(serve(tmp, await get("embedder")))
        elif name == "running":
            have[name] = bot_runner(tmp, await get("fake_llm"), await get("clock"), await get("embedder"))
        elif name == "astore":
            s = Store(tmp / "access.duckdb", 384, extra_migrations=(*ACCESS_MIGRATIONS, *LINKING_MIGRATIONS))
            stack.callback(s.close)
            have[name] = s
        else:
            raise LookupError(f"no fixture {name!r} outside pytest")
        return have[name]

    return {n: await get(n) for n in names}


async def run_test(ref: str, tmp: Path) -> tuple[str, str]:
    """("passed" | "failed" | "skipped", detail) for one test function run outside pytest."""
    fn = function_of(ref)
    names = list(inspect.signature(fn).parameters)
    try:
        async with AsyncExitStack() as stack:
            kwargs = await _fixtures(names, tmp, stack)
            if inspect.iscoroutinefunction(fn):
                await fn(**kwargs)
            else:
                await asyncio.to_thread(fn, **kwargs)
    except pytest.skip.Exception as exc:
        return "skipped", str(exc.msg)
    except Exception as exc:
        return "failed", "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300]
    return "passed", ""


async def run_row(name: str, tmp: Path) -> Counts:
    """Run one row's tests: in = run, answered = passed, leaked = failed; skips are named in the note."""
    passed, failed, notes = 0, 0, []
    for i, ref in enumerate(ROWS[name]):
        outcome, detail = await run_test(ref, tmp / f"t{i}")
        passed += outcome == "passed"
        failed += outcome == "failed"
        if outcome != "passed":
            notes.append(f"{outcome}: {ref.rpartition('::')[2]} ({detail})")
    files: dict[str, int] = {}
    for ref in ROWS[name]:
        path = ref.rpartition("::")[0].replace(".", "/") + ".py"
        files[path] = files.get(path, 0) + 1
    where = ", ".join(f"{path} ({n})" for path, n in files.items())
    return Counts(name, messages_in=passed + failed, answered=passed, stored=0, lost=0, leaked=failed,
                  note="; ".join([where, *notes]))


def _register(name: str) -> None:
    @scenario(name)
    async def row(tmp: Path) -> Counts:
        return await run_row(name, tmp)


for _name in ROWS:
    _register(_name)


def test_every_row_names_tests_this_runner_can_run():
    """A row that points at a missing test, or at one whose fixtures it cannot give, would print
    an empty or crashing line in the ledger instead of a check."""
    providable = {"tmp_path", "api_store_url", "embedder", "clock", "fake_llm", "api", "running", "astore"}
    for name, refs in ROWS.items():
        assert refs, name
        for ref in refs:
            fn = function_of(ref)
            assert fn.__name__.startswith("test_"), ref
            missing = set(inspect.signature(fn).parameters) - providable
            assert not missing, (ref, missing)
