"""`memgate onboard` (issue 15): non-interactive with flags and interactive through a real
pseudo-terminal, both against the fake LLM and the fake Bot API; the config it writes starts
`memgate run` (a real subprocess), which answers a Telegram message from the owner it made."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import tomllib
from pathlib import Path

import pytest

from bot.config import load_settings
from tests.adapters.pty_screen import Tty, tty_env
from tests.fakes import brain
from tests.fakes.telegram_api import FakeTelegram
from tests.reliability.procs import ROOT, kill, terminate

pytestmark = pytest.mark.timeout(600)  # real subprocesses on a shared 2-core machine

OWNER_ID = 4242


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_", "WECHAT_"))}
    env.update({"PYTHONPATH": ROOT}, **extra)
    return env


@pytest.fixture
async def telegram():
    async with FakeTelegram() as tg:
        yield tg


async def run_and_get_a_reply(config: Path, tg: FakeTelegram, transcript: list[str]) -> str:
    """`memgate --config CONFIG run` as written (no other setting), one message from the owner."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "--config", str(config), "run", cwd=ROOT,
        env=clean_env(MEMGATE_API_PORT="0"),  # the only override: tests run side by side
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        tg.inject_message(OWNER_ID, "hello, I just set you up", first_name="Ann")
        await tg.wait_until(lambda: any("hello, I just set you up" in t for t in tg.sent_texts()), timeout=240)
        reply = next(t for t in tg.sent_texts() if "hello, I just set you up" in t)
        transcript.append(f"[telegram] Ann: hello, I just set you up\n[telegram] bot: {reply}")
        assert await terminate(proc) == 0
    finally:
        await kill(proc)
    return reply


def check_written(config: Path, token: str) -> None:
    text = config.read_text()
    assert token not in text and "#" in text
    data = tomllib.loads(text)
    env_file = Path(data["env_file"])
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert f"TELEGRAM_BOT_TOKEN={token}" in env_file.read_text()
    settings = load_settings(config, env={})
    assert settings.channels.telegram.enabled and settings.secret("telegram_token") == token
    assert f"telegram:{OWNER_ID}" in settings.access.owners


async def test_non_interactive_onboard_writes_a_config_that_run_starts_with(tmp_path, fake_llm, telegram):
    fake_llm.responder = brain.respond
    config = tmp_path / "cfg" / "memgate.toml"
    args = ["--non-interactive", "--config", str(config), "--data-dir", str(tmp_path / "data"),
            "--llm-api-base", fake_llm.base_url, "--channels", "telegram", "--telegram-token-env", "MY_TG_TOKEN",
            "--telegram-api-base", telegram.base_url, "--owner", f"telegram:{OWNER_ID}", "--user", "ann"]
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "onboard", *args, cwd=ROOT,
                                                env=clean_env(MY_TG_TOKEN=telegram.token),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert f"  memgate --config {config} run" in lines
    assert telegram.token not in out.decode() + err.decode()
    assert "getMe" in telegram.calls
    check_written(config, telegram.token)
    assert load_settings(config, env={}).llm.model == "fake-model"   # the first model the server lists
    transcript = ["$ memgate onboard " + " ".join(args), out.decode()]
    reply = await run_and_get_a_reply(config, telegram, transcript)
    assert "You said: hello, I just set you up" in reply
    (tmp_path / "transcript.txt").write_text("\n".join(transcript))


async def test_non_interactive_onboard_with_a_wrong_token_is_one_line_and_writes_nothing(tmp_path, fake_llm, telegram):
    config = tmp_path / "memgate.toml"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "onboard", "--non-interactive", "--config", str(config),
        "--llm-api-base", fake_llm.base_url, "--channels", "telegram", "--telegram-api-base", telegram.base_url,
        cwd=ROOT, env=clean_env(TELEGRAM_BOT_TOKEN="999:wrong"), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode != 0
    assert err.decode().count("\n") == 1 and "Telegram refused the token" in err.decode()
    assert not config.exists()


async def test_non_interactive_onboard_with_no_model_server_says_what_to_run(tmp_path):
    from tests.fakes.ports import free_port

    closed = f"http://127.0.0.1:{free_port()}/v1"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "onboard", "--non-interactive", "--config", str(tmp_path / "m.toml"),
        "--llm-api-base", closed, "--llm-model", "qwen2.5", cwd=ROOT, env=clean_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode != 0 and "Traceback" not in err.decode()
    assert closed in err.decode() and "ollama serve" in err.decode() and "ollama pull qwen2.5" in err.decode()
    assert not (tmp_path / "m.toml").exists()


def onboard_tty(tmp_path: Path, llm_base: str, *args: str) -> tuple[Tty, Path]:
    """`memgate onboard` on a pty, finding the model at `llm_base`; the config it will write (in a
    folder of its own; no MEMGATE_CONFIG)."""
    config = tmp_path / "cfg" / "memgate.toml"
    env = tty_env(tmp_path / "home", None)
    env.pop("MEMGATE_CONFIG")
    return Tty(["-m", "bot.cli", "--config", str(config), "onboard", "--probe", llm_base, *args], env), config


async def answer_data_model_and_name(tty: Tty, data: Path, llm_base: str) -> None:
    """The first questions of an interactive onboard: data folder, the found server, its model,
    the one-call model test, the terminal user's name."""
    await tty.shows("Where should memgate keep its data?")
    tty.send(f"{data}\r")
    await tty.shows("Which one?")
    number = next(line.split(")")[0].strip() for line in tty.screen_lines() if llm_base in line)
    tty.send(f"{number}\r")
    await tty.answers(
        ("Which model?", "fake-model"),
        ("ok, it answered", None),
        ("Your name in the terminal chat", "ann"),
    )


async def test_interactive_onboard_answers_every_question_then_run_replies(tmp_path, fake_llm, telegram):
    fake_llm.responder = brain.respond
    tty, config = onboard_tty(tmp_path, fake_llm.base_url, "--telegram-api-base", telegram.base_url)
    try:
        await answer_data_model_and_name(tty, tmp_path / "data", fake_llm.base_url)
        await tty.answers(
            ("Telegram? [y/N]", "y"),
            ("WeChat (personal account, iLink QR login)? [y/N]", "n"),
            ("Telegram bot token (hidden)", telegram.token),
            ("ok: the token belongs to @memgate_test_bot", None),
            ("Your Telegram user id", ""),
            ("Waiting up to", None),
        )
        telegram.inject_message(OWNER_ID, "/start", first_name="Ann")
        await tty.shows(f"got it: Ann (id {OWNER_ID}) is the owner")
        await tty.shows("Start it with:")
        assert await tty.exit_status() == 0
    finally:
        tty.close()
    screen = "".join(tty._screen.raw)
    assert telegram.token not in screen
    assert f"  memgate --config {config} run\r\n" in screen
    check_written(config, telegram.token)
    transcript = [tty.transcript()]
    # The owner's /start was only read, not confirmed: the gateway answers it as well.
    reply = await run_and_get_a_reply(config, telegram, transcript)
    assert "You said: hello, I just set you up" in reply
    (tmp_path / "transcript.txt").write_text("\n".join(transcript))


async def test_interactive_onboard_logs_the_wechat_bot_in_by_qr_code(tmp_path, fake_llm):
    """The WeChat step runs the real QR login (against the fake iLink server): the code is shown,
    the scan confirmed, the credentials saved in the data folder, and the config enables WeChat."""
    from tests.fakes.ilink import FakeIlink

    fake_llm.responder = brain.respond
    data = tmp_path / "data"
    async with FakeIlink(qr_statuses=("wait", "scaned", "confirmed")) as ilink:
        tty, config = onboard_tty(tmp_path, fake_llm.base_url, "--wechat-api-base", ilink.base_url)
        try:
            await answer_data_model_and_name(tty, data, fake_llm.base_url)
            await tty.answers(
                ("Telegram? [y/N]", "n"),
                ("WeChat (personal account, iLink QR login)? [y/N]", "y"),
                ("Log the WeChat bot in now (QR code)?", "y"),
                ("logged in as WeChat bot", None),
                ("Start it with:", None),
            )
            assert await tty.exit_status() == 0
        finally:
            tty.close()
    assert (data / "wechat_credentials.json").is_file()
    written = tomllib.loads(config.read_text())
    assert written["channels"]["wechat"]["enabled"] is True


async def test_interactive_onboard_refuses_what_is_not_on_a_menu_skips_telegram_and_resumes_later(
        tmp_path, fake_llm, telegram):
    """Issue 27: "9" in the model menu was silently "something else", and an empty token answer
    was asked again forever. Now a menu asks again, and Enter alone at the token leaves Telegram
    for later: the config is written with the rest and says how to add it; onboarding again
    picks up from that config and does the skipped step."""
    fake_llm.responder = brain.respond
    tty, config = onboard_tty(tmp_path, fake_llm.base_url, "--telegram-api-base", telegram.base_url)
    try:
        await tty.answers(
            ("Where should memgate keep its data?", tmp_path / "data"),
            ("Which one?", "9"),
            ("'9' is not on the list", None),
        )
        number = next(line.split(")")[0].strip() for line in tty.screen_lines() if fake_llm.base_url in line)
        tty.send(f"{number}\r")
        await tty.answers(
            ("Which model?", "fake-model"),
            ("ok, it answered", None),
            ("Your name in the terminal chat", "ann"),
            ("Telegram? [y/N]", "maybe"),
            ("please answer y or n", "y"),
            ("WeChat (personal account, iLink QR login)? [y/N]", "n"),
            ("Telegram bot token (hidden)", ""),
            ("Start it with:", None),
        )
        assert await tty.exit_status() == 0
    finally:
        tty.close()
    assert "Telegram: skipped" in tty.transcript()
    assert "getMe" not in telegram.calls
    settings = load_settings(config, env={})
    assert not settings.channels.telegram.enabled and settings.llm.model == "fake-model"

    # Later: onboarding again picks up from the config, Enter keeps each answer, and the skipped
    # step is done now.
    tty, _ = onboard_tty(tmp_path, fake_llm.base_url, "--telegram-api-base", telegram.base_url)
    try:
        await tty.answers(
            ("picking up from it", None),
            ("Where should memgate keep its data?", ""),
            ("Keep the model fake-model", ""),
            ("Your name in the terminal chat [ann]", ""),
            ("Telegram? [y/N]", "y"),
            ("WeChat (personal account, iLink QR login)? [y/N]", ""),
            ("Telegram bot token (hidden)", telegram.token),
            ("Your Telegram user id", OWNER_ID),
            ("Start it with:", None),
        )
        assert await tty.exit_status() == 0
    finally:
        tty.close()
    assert "Testing fake-model" not in tty.transcript()        # kept, not asked again
    check_written(config, telegram.token)
    settings = load_settings(config, env={})
    assert settings.data_path == tmp_path / "data" and settings.channels.console.user == "ann"
    assert "console:ann" in settings.access.owners
    assert (config.parent / "memgate.toml.before-onboard").is_file()


async def test_ctrl_c_at_the_hidden_token_prompt_stops_onboarding_at_once(tmp_path, fake_llm, telegram):
    """Issue 27: Ctrl-C at the hidden token prompt did nothing until Enter."""
    fake_llm.responder = brain.respond
    tty, config = onboard_tty(tmp_path, fake_llm.base_url, "--telegram-api-base", telegram.base_url,
                              "--channels", "telegram")
    try:
        await answer_data_model_and_name(tty, tmp_path / "data", fake_llm.base_url)
        await tty.answers(
            ("Telegram? [Y/n]", ""),
            ("WeChat (personal account, iLink QR login)? [y/N]", ""),
            ("Telegram bot token (hidden)", None),
        )
        tty.send("123:half-typ\x03")            # no Enter: the interrupt alone must end it
        assert await tty.exit_status(timeout=60) == 130
    finally:
        tty.close()
    assert "onboarding stopped" in tty.transcript() and "Traceback" not in tty.transcript()
    assert not config.exists()


async def test_onboarding_offers_a_proxy_when_the_bot_api_cannot_be_reached(tmp_path, fake_llm, telegram):
    """Issue 27: from mainland China the Bot API does not answer and the token prompt looped
    forever. Now the failure to reach it offers a proxy; through it getMe answers, and the config
    keeps the proxy for `memgate run` ([channels.telegram] proxy)."""
    from tests.fakes.ports import free_port
    from tests.fakes.proxy import FakeProxy

    fake_llm.responder = brain.respond
    blocked = free_port()
    base = f"http://127.0.0.1:{blocked}/bot"
    async with FakeProxy({("127.0.0.1", blocked): ("127.0.0.1", int(telegram.base_url.split(":")[2].split("/")[0]))}) as proxy:
        tty, config = onboard_tty(tmp_path, fake_llm.base_url, "--telegram-api-base", base, "--channels", "telegram")
        try:
            await answer_data_model_and_name(tty, tmp_path / "data", fake_llm.base_url)
            await tty.answers(
                ("Telegram? [Y/n]", ""),
                ("WeChat (personal account, iLink QR login)? [y/N]", ""),
                ("Telegram bot token (hidden)", telegram.token),
                ("could not reach the Telegram Bot API", None),
                ("Proxy for Telegram", "socks5://nowhere"),  # not an address: asked again
                ("a proxy is http://HOST:PORT", proxy.url("socks5")),
                ("ok: the token belongs to @memgate_test_bot", None),
                ("Your Telegram user id", OWNER_ID),
                ("Start it with:", None),
            )
            assert await tty.exit_status() == 0
        finally:
            tty.close()
    assert telegram.token not in "".join(tty._screen.raw)
    assert proxy.requests and all(r == f"SOCKS5 127.0.0.1:{blocked}" for r in proxy.requests)
    settings = load_settings(config, env={})
    assert settings.channels.telegram.enabled and settings.channels.telegram.proxy == proxy.url("socks5")
    assert f"telegram:{OWNER_ID}" in settings.access.owners


# --- issue 30: the id a model server lists is what onboard writes --------------------------------

async def test_non_interactive_onboard_writes_the_hugging_face_id_the_server_lists(tmp_path):
    # Found: onboard found the model at the address, its one-call test failed ("LLM Provider NOT
    # provided") and it blamed the server, which never saw a request; nothing was written.
    from tests.fakes.llm_server import FakeLLM

    config = tmp_path / "memgate.toml"
    async with FakeLLM(models=("Qwen/Qwen2.5-7B-Instruct",)) as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "onboard", "--non-interactive", "--config", str(config),
            "--data-dir", str(tmp_path / "data"), "--llm-api-base", server.base_url, cwd=ROOT, env=clean_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, err.decode()
    assert load_settings(config, env={}).llm.model == "Qwen/Qwen2.5-7B-Instruct"
    assert [r["model"] for r in server.requests] == ["Qwen/Qwen2.5-7B-Instruct"]


async def test_non_interactive_onboard_with_a_name_litellm_cannot_route_blames_no_server(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "onboard", "--non-interactive", "--config", str(tmp_path / "m.toml"),
        "--llm-model", "qwen2.5", cwd=ROOT, env=clean_env(), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 240)
    text = err.decode()
    assert proc.returncode != 0 and text.count("\n") == 1 and "Traceback" not in text, text
    assert "'qwen2.5' names no provider litellm knows" in text and "MEMGATE_LLM_API_BASE" in text, text
    assert "running" not in text and "did not answer" not in text
    assert not (tmp_path / "m.toml").exists()


async def test_interactive_onboard_writes_the_gguf_path_picked_from_the_list(tmp_path):
    from tests.fakes.llm_server import FakeLLM

    gguf = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    async with FakeLLM(models=("other.gguf", gguf)) as server:
        tty, config = onboard_tty(tmp_path, server.base_url)
        try:
            await tty.answers(("Where should memgate keep its data?", tmp_path / "data"), ("Which one?", None))
            number = next(line.split(")")[0].strip() for line in tty.screen_lines() if server.base_url in line)
            tty.send(f"{number}\r")
            await tty.answers(
                ("Which model?", "2"),
                ("ok, it answered", None),
                ("Your name in the terminal chat", "ann"),
                ("Telegram? [y/N]", "n"),
                ("WeChat (personal account, iLink QR login)? [y/N]", "n"),
                ("Start it with:", None),
            )
            assert await tty.exit_status() == 0
        finally:
            tty.close()
    assert load_settings(config, env={}).llm.model == gguf
    assert [r["model"] for r in server.requests] == [gguf]
