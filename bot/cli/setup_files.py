"""The files `memgate onboard` leaves behind: a commented config TOML and a private env file.

The TOML holds no secret (bot.config refuses one there); the secrets go to a KEY=VALUE file
created with mode 0600 that the config names in `env_file`. Rendering is pure; writing is one
function that refuses to overwrite unless told to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bot.config import SECRET_ENV
from memory import private_files


@dataclass(frozen=True, slots=True)
class SetupChoices:
    """What the person chose in `memgate onboard` (secrets included: never logged, never printed)."""

    data_dir: str
    llm_api_base: str = ""
    llm_model: str = ""
    llm_found: str = ""                  # what onboard found there ("Ollama at ..."), for a comment
    console_user: str = ""
    telegram: bool = False
    telegram_base_url: str = ""
    telegram_proxy: str = ""             # where the Bot API is reached only through a proxy
    telegram_bot: str = ""               # @username from getMe, for a comment
    wechat: bool = False
    owners: tuple[str, ...] = ()
    secrets: dict[str, str] = field(default_factory=dict, repr=False)   # SECRET_ENV names -> values


def _s(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and DEL (which JSON leaves as it is but
    TOML refuses raw) is escaped too."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def render_config(c: SetupChoices, env_path: Path | None, now: datetime) -> str:
    """The config TOML, commented for the person who will read it next month."""
    lines = [
        f"# memgate configuration, written by `memgate onboard` on {now:%Y-%m-%d %H:%M}.",
        "# Every key and its default is in config.example.toml; change this file and restart memgate.",
        "# No secret is kept here: they are in env_file (readable by you only).",
        "",
        f"data_dir = {_s(c.data_dir)}   # the database, the log file (memgate.log), skills, the WeChat login",
    ]
    if env_path is not None:
        lines.append(f"env_file = {_s(str(env_path))}   # the secrets (KEY=VALUE, mode 0600); the environment wins")
    lines += ["", "[llm]"]
    found = f"   # {c.llm_found}" if c.llm_found else ""
    if c.llm_api_base:
        lines.append(f"api_base = {_s(c.llm_api_base)}{found}")
    lines.append(f"model = {_s(c.llm_model)}   # the model that answers (any litellm name, or the server's own name)")
    lines += ["", "[channels.console]", "enabled = true   # the terminal: `memgate chat`, or `memgate run` in a terminal"]
    if c.console_user:
        lines.append(f"user = {_s(c.console_user)}   # your name in the terminal chat")
    lines += ["", "[channels.telegram]", f"enabled = {'true' if c.telegram else 'false'}"
              + (f"   # the bot {c.telegram_bot}; its token is TELEGRAM_BOT_TOKEN in env_file" if c.telegram else "")]
    if c.telegram_base_url:
        lines.append(f"base_url = {_s(c.telegram_base_url)}   # a Bot API server other than api.telegram.org")
    if c.telegram_proxy:
        lines.append(f"proxy = {_s(c.telegram_proxy)}   # the Bot API through this proxy (it is not reachable directly)")
    lines += ["", "[channels.wechat]", f"enabled = {'true' if c.wechat else 'false'}"
              + ("   # personal WeChat (iLink): log in with `memgate wechat login`" if c.wechat else "")]
    lines += ["", "[access]",
              f"owners = [{', '.join(_s(o) for o in c.owners)}]   # let in without pairing; they /approve everyone else",
              'dm_policy = "pairing"   # a stranger gets a code; an owner lets them in with /approve CODE', ""]
    return "\n".join(lines)


def render_env(c: SetupChoices) -> str:
    """The env file: one KEY=VALUE line per secret the choices hold."""
    known = set(SECRET_ENV.values())
    body = [f"{k}={v}" for k, v in sorted(c.secrets.items()) if k in known and v]
    return "# memgate secrets, written by `memgate onboard`. Keep this file private (mode 0600).\n" + \
        "".join(line + "\n" for line in body)


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, from its first byte (no window with looser rights)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    private_files.write_private(path, text, durable=True)


def write_setup(c: SetupChoices, config_path: Path, now: datetime) -> Path | None:
    """Write the config (and the env file beside it when there are secrets); returns the env path."""
    env_path = config_path.with_name(config_path.stem + ".env") if any(c.secrets.values()) else None
    if env_path is not None:
        write_private(env_path, render_env(c))
    # The config names the owners' accounts and the data folder: private like everything memgate writes.
    write_private(config_path, render_config(c, env_path, now))
    return env_path
