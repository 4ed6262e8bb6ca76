"""Bad configuration at start-up: one clear line naming the key or path, a non-zero exit, never a
traceback. Every case goes through the real `memgate` command in a subprocess."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.settings import Settings

ROOT = str(Path(__file__).resolve().parents[2])


def _numeric_keys(model: type[BaseModel] = Settings, prefix: str = ""):
    """(dotted key, annotation, metadata) of every int/float setting, nested sections included."""
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            yield from _numeric_keys(sub, f"{prefix}{name}.")
        elif sub in (int, float):
            yield f"{prefix}{name}", sub, field.metadata


def _bounds(metadata) -> tuple[float | None, float | None, bool, bool]:
    lo = hi = None
    lo_strict = hi_strict = False
    for m in metadata:
        if getattr(m, "ge", None) is not None:
            lo = m.ge
        if getattr(m, "gt", None) is not None:
            lo, lo_strict = m.gt, True
        if getattr(m, "le", None) is not None:
            hi = m.le
        if getattr(m, "lt", None) is not None:
            hi, hi_strict = m.lt, True
    return lo, hi, lo_strict, hi_strict


def _bad_values() -> list[tuple[str, str]]:
    """For every numeric key: one value below its range and one above."""
    out = []
    for key, kind, meta in _numeric_keys():
        lo, hi, lo_strict, hi_strict = _bounds(meta)
        assert lo is not None and hi is not None, f"{key} has no range: give it Field(ge=..., le=...)"
        below = lo if lo_strict else lo - 1
        above = hi if hi_strict else hi + 1
        for v in (below, above):
            out.append((key, repr(kind(v)) if kind is float else str(int(v))))
    return out


def _toml(key: str, value: str) -> str:
    *section, name = key.split(".")
    head = f"[{'.'.join(section)}]\n" if section else ""
    return f"{head}{name} = {value}\n"


def _env(tmp: Path, config: Path | str, **extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
    env.update({"MEMGATE_DATA_DIR": str(tmp / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(config)})
    env.update(extra)
    return env


async def _memgate(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, env=env, cwd=ROOT, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, err.decode("utf-8", "replace")


def _one_clear_line(code: int, err: str, *must_name: str) -> None:
    assert code != 0, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for name in must_name:
        assert name in lines[0], (name, err)


def test_every_numeric_key_out_of_range_is_refused_naming_it(tmp_path):
    from bot.config import load_settings
    from bot.errors import ConfigError

    cases = _bad_values()
    assert len(cases) >= 2 * 25  # every section's numbers are covered
    unrefused = []
    for i, (key, value) in enumerate(cases):
        cfg = tmp_path / f"c{i}.toml"
        cfg.write_text(_toml(key, value))
        try:
            load_settings(cfg, env={})
        except ConfigError as exc:
            if f"'{key}'" not in str(exc) or "\n" in str(exc):
                unrefused.append((key, value, str(exc)))
        else:
            unrefused.append((key, value, "accepted"))
    assert unrefused == []


@pytest.mark.parametrize("side", [0, 1], ids=["below", "above"])
async def test_out_of_range_keys_through_the_cli_are_one_line_naming_each(tmp_path, side):
    cases = _bad_values()[side::2]
    sections: dict[str, list[str]] = {}
    for key, value in cases:
        *section, name = key.split(".")
        sections.setdefault(".".join(section), []).append(f"{name} = {value}")
    text = "\n".join(sections.pop("", [])) + "\n"
    text += "".join(f"[{sec}]\n" + "\n".join(lines) + "\n" for sec, lines in sections.items())
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    code, err = await _memgate(_env(tmp_path, cfg), "jobs")
    _one_clear_line(code, err, *(f"'{key}'" for key, _ in cases))
    assert code == 2
    assert not (tmp_path / "data").exists()  # refused before touching anything


@pytest.mark.parametrize("text, names", [
    ('log_level = "LOUD"\n', ("'log_level'", "LOUD")),
    ("[embedding]\nprovider = 'litellm'\nmodel = 'x'\ndim = -1\n", ("'embedding.dim'",)),
    ("[memory]\nsearch_default = 30\nsearch_max = 20\n", ("memory.search_default", "memory.search_max")),
    ("[agent]\nmax_tool_rounds = 'many'\n", ("'agent.max_tool_rounds'",)),
])
async def test_bad_values_name_their_key(tmp_path, text, names):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    code, err = await _memgate(_env(tmp_path, cfg), "jobs")
    _one_clear_line(code, err, *names)


async def test_log_level_is_case_insensitive(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('log_level = "debug"\n')
    code, err = await _memgate(_env(tmp_path, cfg), "jobs")
    assert code == 0, err


async def test_unusable_config_files_are_one_line_naming_the_path(tmp_path):
    missing = tmp_path / "missing.toml"
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes('[agent]\nname = "caf\xe9"\n'.encode("latin-1"))
    # A socket cannot be opened as a file: the "exists but cannot be read" case, even as root.
    sock_path = tmp_path / "sock.toml"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, words in ((missing, ("does not exist", "MEMGATE_CONFIG")), (folder, ("is a directory",)),
                            (latin1, ("not UTF-8", "line 2")), (sock_path, ("cannot be read",))):
            code, err = await _memgate(_env(tmp_path, path), "jobs")
            _one_clear_line(code, err, str(path), *words)
            code, err = await _memgate(_env(tmp_path, tmp_path / "unused.toml"), "--config", str(path), "jobs")
            _one_clear_line(code, err, str(path))
    finally:
        sock.close()


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nobody can write, root included (the tests may run as root, which ignores chmod)."""
    path = tmp_path / "ro"
    path.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i not available here")
    yield path
    subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("args", [("memory", "list"), ("chat",), ("jobs",)])
async def test_read_only_data_folder_is_one_line_naming_it(tmp_path, read_only_dir, args):
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    env = _env(tmp_path, cfg, MEMGATE_DATA_DIR=str(read_only_dir), MEMGATE_LLM_MODEL="openai/x",
               MEMGATE_LLM_API_BASE="http://127.0.0.1:9/v1")
    code, err = await _memgate(env, *args)
    _one_clear_line(code, err, str(read_only_dir))


async def test_data_dir_that_is_a_file_is_one_line_naming_it(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    (tmp_path / "afile").write_text("x")
    code, err = await _memgate(_env(tmp_path, cfg, MEMGATE_DATA_DIR=str(tmp_path / "afile" / "data")), "memory", "list")
    _one_clear_line(code, err, str(tmp_path / "afile"))


def test_settings_annotations_are_plain_numbers():
    """The range test finds keys by annotation: a numeric key typed otherwise would escape it."""
    for key, kind, _ in _numeric_keys():
        assert kind in (int, float), key
    assert typing.get_args(Settings.model_fields["log_level"].annotation)


@pytest.mark.parametrize("url, names", [
    ("postgresql://bob:hunter2@127.0.0.1/memgate", ("'store.url'", "MEMGATE_STORE_PASSWORD")),
    ("mysql://bob@127.0.0.1/memgate", ("'store.url'", "unknown scheme")),
    ("duckdb://relative/file.duckdb", ("'store.url'", "absolute")),
])
async def test_bad_store_urls_are_one_line_and_never_echo_a_password(tmp_path, url, names):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\nurl = "{url}"\n')
    code, err = await _memgate(_env(tmp_path, cfg), "jobs")
    _one_clear_line(code, err, *names)
    assert "hunter2" not in err
    assert not (tmp_path / "data").exists()


def test_store_url_defaults_to_the_duckdb_file_in_the_data_folder(tmp_path):
    s = Settings(data_dir=str(tmp_path))
    assert s.store_url == f"duckdb://{tmp_path / 'memgate.duckdb'}"
    assert Settings(store={"url": "postgresql://bob@db/memgate"}).store_url == "postgresql://bob@db/memgate"


# --- the environment (issue 27: MEMGATE_LLM_MODLE was ignored, ...ENABLED=yesplease became false) ---

async def test_mistyped_variable_and_bad_boolean_are_one_line_through_the_cli(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    code, err = await _memgate(_env(tmp_path, cfg, MEMGATE_LLM_MODLE="qwen2.5"), "jobs")
    _one_clear_line(code, err, "MEMGATE_LLM_MODLE", "did you mean MEMGATE_LLM_MODEL?")
    code, err = await _memgate(_env(tmp_path, cfg, MEMGATE_CHANNELS_TELEGRAM_ENABLED="yesplease"), "jobs")
    _one_clear_line(code, err, "MEMGATE_CHANNELS_TELEGRAM_ENABLED", "yesplease", "true or false")
    assert not (tmp_path / "data").exists()


def test_every_setting_variable_is_known_and_a_typo_of_each_names_it():
    from bot.config import env_names, load_settings
    from bot.errors import ConfigError

    names = env_names()
    assert {"MEMGATE_LLM_MODEL", "MEMGATE_CHANNELS_WECHAT_MP_PORT", "MEMGATE_LLM_API_KEY"} <= names
    load_settings("/dev/null", env={"MEMGATE_CONFIG": "/dev/null", "MEMGATE_LLM_MODEL": "x"})  # known: accepted
    for var in sorted(n for n in names if n.startswith("MEMGATE_")):  # TELEGRAM_BOT_TOKEN is not ours to check
        typo = var[:-2] + var[-1] + var[-2]   # the last two letters swapped
        if typo in names:
            continue
        with pytest.raises(ConfigError) as caught:
            load_settings("/dev/null", env={typo: "1"})
        assert f"unknown environment variable {typo}: did you mean {var}?" in str(caught.value)


@given(st.text(max_size=12))
def test_booleans_accept_only_the_usual_spellings(value):
    from bot.environment import parse_bool
    from bot.errors import ConfigError

    word = value.strip().lower()
    if word in {"true", "1", "yes", "on"}:
        assert parse_bool("MEMGATE_API_ENABLED", value) is True
    elif word in {"false", "0", "no", "off"}:
        assert parse_bool("MEMGATE_API_ENABLED", value) is False
    else:
        with pytest.raises(ConfigError, match="MEMGATE_API_ENABLED.*not a boolean"):
            parse_bool("MEMGATE_API_ENABLED", value)
