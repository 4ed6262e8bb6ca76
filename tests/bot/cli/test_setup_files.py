"""The files onboard writes (issue 15): secrets only in a mode-600 env file that round-trips any
value, a commented TOML that loads, nested env overrides for containers."""

from __future__ import annotations

import os
import stat
from datetime import datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot.config import load_settings, read_env_file
from bot.errors import ConfigError
from bot.cli.setup_files import SetupChoices, render_config, write_setup

secret_text = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=60) \
    .map(str.strip).filter(lambda v: v and not (len(v) >= 2 and v[0] == v[-1] and v[0] in "'\""))


@settings(max_examples=60, deadline=None)
@given(token=secret_text, key=secret_text, name=st.text(min_size=1, max_size=30))
@example(token="0", key="0", name="\x7f")   # DEL: JSON leaves it raw, TOML refuses it raw
def test_secrets_round_trip_through_the_env_file_and_never_reach_the_toml(tmp_path_factory, token, key, name):
    tmp = tmp_path_factory.mktemp("setup")
    # Marked, so a leak into the TOML is found whatever the random rest of the value is.
    token, key = f"TGSECRET-{token}", f"KEYSECRET-{key}"
    choices = SetupChoices(data_dir=str(tmp / "data"), llm_model="openai/gpt-4o-mini", console_user=name,
                           telegram=True, owners=("telegram:1",),
                           secrets={"TELEGRAM_BOT_TOKEN": token, "MEMGATE_LLM_API_KEY": key})
    config = tmp / "memgate.toml"
    env_path = write_setup(choices, config, datetime(2026, 1, 1))
    assert env_path is not None and stat.S_IMODE(env_path.stat().st_mode) == 0o600
    assert read_env_file(env_path) == {"TELEGRAM_BOT_TOKEN": token, "MEMGATE_LLM_API_KEY": key}
    s = load_settings(config, env={})
    assert s.secret("telegram_token") == token and s.secret("llm_api_key") == key
    assert s.channels.console.user == name
    text = config.read_text()
    assert "TGSECRET" not in text.replace(name, "") and "KEYSECRET" not in text.replace(name, "")


def test_the_environment_wins_over_the_env_file(tmp_path):
    choices = SetupChoices(data_dir=str(tmp_path), llm_model="m", secrets={"MEMGATE_LLM_API_KEY": "from-file"})
    write_setup(choices, tmp_path / "c.toml", datetime(2026, 1, 1))
    assert load_settings(tmp_path / "c.toml", env={"MEMGATE_LLM_API_KEY": "from-env"}).secret("llm_api_key") == "from-env"


def test_an_env_file_others_can_read_is_refused_naming_it(tmp_path):
    p = tmp_path / "memgate.env"
    p.write_text("TELEGRAM_BOT_TOKEN=x\n")
    os.chmod(p, 0o644)
    (tmp_path / "c.toml").write_text(f'env_file = "{p}"\n')
    with pytest.raises(ConfigError, match="chmod 600"):
        load_settings(tmp_path / "c.toml", env={})
    os.chmod(p, 0o600)
    p.write_text("SOMETHING_ELSE=x\n")
    with pytest.raises(ConfigError, match="line 1"):
        load_settings(tmp_path / "c.toml", env={})


def test_the_written_config_is_commented_and_loads(tmp_path):
    text = render_config(SetupChoices(data_dir="~/d", llm_api_base="http://127.0.0.1:11434/v1", llm_model="qwen2.5",
                                      llm_found="Ollama at http://127.0.0.1:11434/v1", console_user="ann",
                                      owners=("console:ann",)), None, datetime(2026, 1, 1))
    assert text.count("#") >= 8 and "Ollama at" in text
    (tmp_path / "c.toml").write_text(text)
    s = load_settings(tmp_path / "c.toml", env={})
    assert s.llm.api_base == "http://127.0.0.1:11434/v1" and s.access.owners == ("console:ann",)


def test_nested_sections_can_be_set_from_the_environment():
    s = load_settings(os.devnull, env={"MEMGATE_CHANNELS_TELEGRAM_ENABLED": "true", "MEMGATE_CHANNELS_WECHAT_MP_PORT": "9001",
                                       "MEMGATE_CHANNELS_WECHAT_ENABLED": "false"})
    assert s.channels.telegram.enabled and s.channels.wechat_mp.port == 9001 and not s.channels.wechat.enabled
