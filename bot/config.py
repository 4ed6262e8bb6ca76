"""Loading the settings: one TOML file validated into `Settings` (bot/settings.py), plus the environment.

Secrets come only from the environment (MEMGATE_LLM_API_KEY, TELEGRAM_BOT_TOKEN, ...); a
secret written in the file is refused. An unknown or mistyped key is an error naming it.
Non-secret keys may also be overridden from the environment as MEMGATE_<SECTION>_<KEY>
(e.g. MEMGATE_LLM_API_BASE, MEMGATE_LLM_MODEL, MEMGATE_DATA_DIR).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bot.environment import check_names, parse_bool
from bot.errors import ConfigError
from bot.settings import Settings

DEFAULT_CONFIG_PATHS = ("memgate.toml", "~/.config/memgate/memgate.toml")


# Environment variables that hold secrets, by the name the code asks for.
SECRET_ENV = {
    "llm_api_key": "MEMGATE_LLM_API_KEY",
    "memory_llm_api_key": "MEMGATE_MEMORY_LLM_API_KEY",
    "embedding_api_key": "MEMGATE_EMBEDDING_API_KEY",
    "speech_api_key": "MEMGATE_SPEECH_API_KEY",
    "telegram_token": "TELEGRAM_BOT_TOKEN",
    "wechat_mp_token": "WECHAT_MP_TOKEN",
    "wechat_mp_secret": "WECHAT_MP_APP_SECRET",
    "wechat_mp_aes_key": "WECHAT_MP_AES_KEY",
    "store_password": "MEMGATE_STORE_PASSWORD",
}
_SECRET_KEYS = frozenset({"api_key", "llm_api_key", "key", "token", "bot_token", "secret", "app_secret", "password",
                          "aes_key", "encoding_aes_key", "access_token"})


def _walk_secrets(data: dict[str, Any], prefix: str = "") -> None:
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            _walk_secrets(value, path + ".")
        elif key.lower() in _SECRET_KEYS:
            raise ConfigError(f"'{path}' looks like a secret: secrets are read from the environment only "
                              f"({', '.join(sorted(SECRET_ENV.values()))}), remove it from the file")


def _env_overrides(data: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Apply MEMGATE_<SECTION>_<KEY> for known keys (MEMGATE_DATA_DIR, MEMGATE_LLM_API_BASE, ...),
    nested sections too (MEMGATE_CHANNELS_TELEGRAM_ENABLED): names come from the model, so
    `channels.wechat` and `channels.wechat_mp` cannot be confused."""
    return _overrides(Settings, data, env, "MEMGATE")


def _overrides(model: type[BaseModel], data: dict[str, Any], env: dict[str, str], prefix: str) -> dict[str, Any]:
    data = dict(data)
    for name, field in model.model_fields.items():
        if name == "secrets" or name in _SECRET_KEYS:
            continue
        var = f"{prefix}_{name}".upper()
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            inner = data.get(name)
            merged = _overrides(sub, inner if isinstance(inner, dict) else {}, env, var)
            if merged or isinstance(inner, dict):
                data[name] = merged
        elif var in env:
            data[name] = _coerce(var, env[var], field.annotation)
    return data


def env_names(model: type[BaseModel] | None = None, prefix: str = "MEMGATE") -> set[str]:
    """Every MEMGATE_* variable that overrides a setting, plus the secrets' (as `_overrides` reads them)."""
    model = model or Settings
    names: set[str] = set(SECRET_ENV.values()) if prefix == "MEMGATE" else set()
    for name, field in model.model_fields.items():
        if name == "secrets" or name in _SECRET_KEYS:
            continue
        var = f"{prefix}_{name}".upper()
        sub = field.annotation
        names |= env_names(sub, var) if isinstance(sub, type) and issubclass(sub, BaseModel) else {var}
    return names


def _coerce(var: str, value: str, annotation: Any) -> Any:
    if annotation is bool:
        return parse_bool(var, value)
    if getattr(annotation, "__origin__", None) is tuple:
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return value


def _read_toml(p: Path) -> dict[str, Any]:
    """The file's TOML; every way it can fail is one ConfigError naming the path."""
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"config file {p} is a directory, not a TOML file") from None
    except PermissionError:
        raise ConfigError(f"config file {p} cannot be read (permission denied)") from None
    except OSError as exc:
        raise ConfigError(f"config file {p} cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"config file {p} is not UTF-8 (bad byte at line {line}); save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None


def read_env_file(p: Path) -> dict[str, str]:
    """The secrets in a KEY=VALUE file (blank lines and # comments skipped; only SECRET_ENV names).

    It must be readable by its owner only: a secrets file others can read is refused, naming it."""
    try:
        mode = p.stat().st_mode
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"env_file {p} does not exist (it holds the secrets; `memgate onboard` writes it)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"env_file {p} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if mode & 0o077:
        raise ConfigError(f"env_file {p} can be read by others (mode {mode & 0o777:o}): run chmod 600 {p}")
    known = set(SECRET_ENV.values())
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in known:
            raise ConfigError(f"env_file {p} line {n}: expected one of {', '.join(sorted(known))} = VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def load_settings(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read the TOML file (explicit path, $MEMGATE_CONFIG, ./memgate.toml or ~/.config/...), then env.

    A file named explicitly (argument or $MEMGATE_CONFIG) must exist; the default places may not."""
    env = dict(os.environ if env is None else env)
    check_names(env, env_names())
    named = str(path) if path else env.get("MEMGATE_CONFIG") or None
    candidates = [named] if named else list(DEFAULT_CONFIG_PATHS)
    data: dict[str, Any] = {}
    for cand in candidates:
        p = Path(os.path.expanduser(str(cand)))
        if p.exists():
            data = _read_toml(p)
            break
        if named:
            via = "" if path else " (from MEMGATE_CONFIG)"
            raise ConfigError(f"config file {p}{via} does not exist")
    _walk_secrets(data)
    # Secrets kept in a private file beside the config (`memgate onboard` writes one): they fill
    # in what the environment does not set, and only secret names are taken from it.
    secrets_file = env.get("MEMGATE_ENV_FILE") or data.get("env_file") or ""
    if secrets_file:
        for var, value in read_env_file(Path(os.path.expanduser(str(secrets_file)))).items():
            env.setdefault(var, value)
    data = _env_overrides(data, env)
    data["secrets"] = {name: env[var] for name, var in SECRET_ENV.items() if env.get(var)}
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key '{loc}'")
            elif loc:
                got = err.get("input")
                # Never echo a store URL: it may hold the password the check refuses.
                shown = f" (got {got!r})" if isinstance(got, (str, int, float, bool)) and loc != "store.url" else ""
                problems.append(f"'{loc}': {err['msg'].removeprefix('Value error, ')}{shown}")
            else:
                problems.append(err["msg"].removeprefix("Value error, "))
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
