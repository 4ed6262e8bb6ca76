"""The settings' shape: one frozen pydantic model per TOML section, with defaults and ranges.

`Settings` is what every part reads; each key is documented, with its default and range, in
config.example.toml. How a file and the environment become a `Settings` (the TOML, the secrets
file, MEMGATE_<SECTION>_<KEY> overrides, the one-line errors) is bot/config.py's job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memory.errors import StoreError
from memory.recall.calibration import MIN_CONFIDENCE
from memory.store.url import duckdb_url, parse_store_url


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMConfig(_Section):
    model: str = ""                     # any litellm model name; empty = no LLM configured
    api_base: str = ""                  # an OpenAI-compatible server (Ollama, llama.cpp, vLLM)
    timeout: float = Field(60.0, gt=0, le=3600)
    first_token_timeout: float = Field(30.0, gt=0, le=3600)  # a reply's first token, or the server is reported silent
    retries: int = Field(2, ge=0, le=10)
    temperature: float = Field(0.3, ge=0, le=2)
    max_tokens: int = Field(1024, ge=1, le=1_000_000)
    memory_model: str = ""              # model for ingest/tasks; empty = same as `model`
    concurrency: int = Field(0, ge=0, le=256)  # calls one model server gets at once; 0 = 1 on this machine, 8 hosted
    memory_share: float = Field(0.25, ge=0.05, le=0.9)  # the server's time memory keeps while replies queue
    memory_llm: bool = True             # false = raw memory (no titles, facts, summaries)


class EmbeddingConfig(_Section):
    provider: Literal["local", "litellm"] = "local"
    model: str = ""                     # litellm provider: the embedding model name
    api_base: str = ""
    dim: int = Field(384, ge=1, le=16384)


class MemoryConfig(_Section):
    inject_items: int = Field(6, ge=1, le=50)
    inject_tokens: int = Field(800, ge=50, le=100_000)
    search_default: int = Field(10, ge=1, le=100)
    search_max: int = Field(20, ge=1, le=100)
    half_life_days: float = Field(14.0, gt=0, le=36500)
    decay_floor: float = Field(0.95, ge=0, le=1)
    min_confidence: float = Field(MIN_CONFIDENCE, ge=0, le=1)  # recall abstains below (memory/recall/calibration.py)
    mmr_lambda: float = Field(0.7, ge=0, le=1)
    fusion: Literal["convex", "rrf"] = "convex"
    dedup_threshold: float = Field(0.93, ge=0, le=1)
    fact_candidate_threshold: float = Field(0.86, ge=0, le=1)
    max_ingest_attempts: int = Field(3, ge=1, le=20)
    max_facts_per_turn: int = Field(20, ge=1, le=50)
    ingest_workers: int = Field(4, ge=1, le=64)  # spaces ingested at once (each space's turns stay in order)
    ingest_batch_tokens: int = Field(2000, ge=1, le=64_000)  # a space's queued turns share one LLM call up to this
    ingest_backlog_max: int = Field(100, ge=0, le=1_000_000)  # turns due beyond which a new turn waits for ingest; 0 = never
    embed_piece_chars: int = Field(2000, ge=200, le=32_000)
    embed_max_pieces: int = Field(4, ge=1, le=64)
    keep_turn_text_days: float = Field(7.0, ge=1, le=3650)  # an ingested turn's words leave the ingest queue after this
    forget_raw_after_days: float = Field(0.0, ge=0, le=36500)  # 0 = keep; else raw messages go once learnt from (memory.retention)
    # Memory work on a model with its own address (a cheaper or a remote one); its key in
    # MEMGATE_MEMORY_LLM_API_KEY. Empty: [llm]'s server (its `model`, or `memory_model`).
    llm_model: str = ""
    llm_api_base: str = ""              # its OpenAI-compatible server; empty = its provider's own address
    llm_concurrency: int = Field(0, ge=0, le=256)  # calls that server gets at once; 0 = 1 on this machine, 8 hosted
    llm_timeout: float = Field(0.0, ge=0, le=3600)  # seconds a memory call may take (any memory model); 0 = [llm] timeout

    @model_validator(mode="after")
    def _search_bounds(self) -> MemoryConfig:
        if self.search_default > self.search_max:
            raise ValueError(f"memory.search_default ({self.search_default}) is above memory.search_max ({self.search_max})")
        return self


class SpeechConfig(_Section):
    """Speech-to-text for voice notes (bot/media/speech.py): litellm's transcription call."""

    model: str = ""                     # e.g. "openai/whisper-1"; empty = voice notes wait for one
    api_base: str = ""                  # an OpenAI-compatible /v1 (a local whisper server), or empty for the provider's
    language: str = ""                  # ISO-639-1 hint ("en", "zh"); empty = the server detects it
    timeout: float = Field(60.0, gt=0, le=600)
    max_seconds: float = Field(300.0, gt=0, le=7200)  # longer notes are refused with a clear answer
    max_mb: float = Field(20.0, gt=0, le=100)         # bigger audio files are refused before download
    keep_audio: bool = False            # true: the audio is kept in the data folder (media/), private to the owner


class MediaConfig(_Section):
    """Photos and files people send (bot/media/)."""

    vision: Literal["auto", "on", "off"] = "auto"  # auto: litellm's capability lookup for [llm] model
    max_image_mb: float = Field(5.0, gt=0, le=50)
    max_file_mb: float = Field(10.0, gt=0, le=100)
    fetch_timeout: float = Field(30.0, gt=0, le=600)
    max_document_chars: int = Field(100_000, ge=1000, le=2_000_000)  # text kept of one document
    max_pdf_pages: int = Field(100, ge=1, le=5000)
    document_chunk_chars: int = Field(1500, ge=200, le=20_000)  # one memory row per piece of this size
    retry_minutes: float = Field(10.0, gt=0, le=10_080)  # a failed fetch/transcription is tried again after this
    max_attempts: int = Field(5, ge=1, le=100)           # then the person is told it was given up
    # A PDF is read in a child process with these limits; one that hits them is answered as
    # unreadable and never read again, even after a restart (bot/media/sandbox.py, issue 31).
    read_timeout: float = Field(30.0, ge=1, le=600)      # seconds one PDF may take to read
    read_memory_mb: int = Field(512, ge=128, le=16_384)  # the reading child's address space
    max_readers: int = Field(2, ge=1, le=16)             # PDFs read at once
    # Messages kept waiting for their attachment (no speech endpoint yet, a failed fetch): bounded.
    max_waiting_per_person: int = Field(10, ge=1, le=1000)
    max_waiting: int = Field(500, ge=1, le=100_000)      # across everyone


class AgentConfig(_Section):
    name: str = "memgate"
    max_tool_rounds: int = Field(4, ge=0, le=20)
    turn_timeout: float = Field(120.0, gt=0, le=3600)
    history_tokens: int = Field(2000, ge=0, le=1_000_000)
    session_idle_hours: float = Field(2.0, gt=0, le=8760)
    queue_size: int = Field(20, ge=1, le=10_000)
    max_message_chars: int = Field(20_000, ge=100, le=1_000_000)
    max_reply_chars: int = Field(20_000, ge=500, le=1_000_000)
    system_prompt: str = ""             # extra instructions appended to the built-in prompt


class AccessConfig(_Section):
    dm_policy: Literal["pairing", "allowlist", "open", "disabled"] = "pairing"
    group_policy: Literal["allowlist", "open", "disabled"] = "allowlist"
    require_mention: bool = True
    owners: tuple[str, ...] = ()        # "telegram:12345", "wechat:wxid_abc"
    allow: tuple[str, ...] = ()         # identities allowed under the allowlist policy
    groups: tuple[str, ...] = ()        # "telegram:-100123" groups allowed under the allowlist policy
    pairing_ttl_minutes: int = Field(60, ge=1, le=10_080)
    max_pending: int = Field(10, ge=1, le=1000)          # waiting requests kept; a new one expires the oldest
    pairing_codes_per_hour: int = Field(3, ge=1, le=100)  # codes one stranger may get in an hour
    link_code_minutes: int = Field(10, ge=1, le=1440)     # how long a /link code (and its claim) stays valid
    link_attempts_per_hour: int = Field(5, ge=1, le=100)  # wrong link codes one account may try per hour
    public_writers: Literal["admins", "everyone"] = "admins"  # who may write to the public space


class TelegramConfig(_Section):
    enabled: bool = False
    base_url: str = ""                  # a local Bot API server; empty = api.telegram.org
    # Downloads go only to the server's file address (derived from base_url: …/bot -> …/file/bot),
    # never to a path getFile names, unless local_mode says which folder may be read (issue 31).
    base_file_url: str = ""             # empty = derived from base_url, or Telegram's
    local_mode: bool = False            # a local Bot API server in --local mode answers getFile with disk paths
    local_dir: str = ""                 # the folder it keeps files in (its --dir); read only inside it
    poll_timeout: float = Field(30.0, gt=0, le=300)
    # Where the Bot API is blocked (mainland China): every Bot API call goes through this proxy.
    proxy: str = ""                     # http://host:port or socks5://host:port; empty = direct
    # A reply being written grows in one message, edited at most this often per chat (groups: 3 s
    # at least); 0 = replies are sent whole.
    stream_seconds: float = Field(1.0, ge=0, le=60)

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, value: str) -> str:
        return check_proxy_url(value)

    @model_validator(mode="after")
    def _local_files(self) -> TelegramConfig:
        if self.local_mode and not self.local_dir.strip():
            raise ValueError("channels.telegram.local_mode = true needs local_dir: the folder the local Bot API "
                             "server keeps its files in (its --dir); only files inside it are read")
        if self.local_dir.strip() and not self.local_mode:
            raise ValueError("channels.telegram.local_dir is set but local_mode is false: set local_mode = true "
                             "to read the local Bot API server's files from that folder")
        return self


PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


def check_proxy_url(value: str) -> str:
    """A proxy address as httpx takes it (HTTP or SOCKS5, with a port), or "" for none."""
    from urllib.parse import urlsplit

    value = value.strip()
    if not value:
        return ""
    try:
        url = urlsplit(value)
        port = url.port
    except ValueError:
        port = None
    if url.scheme not in PROXY_SCHEMES or not url.hostname or port is None:
        raise ValueError(f"a proxy is {' or '.join(f'{s}://HOST:PORT' for s in ('http', 'socks5'))} "
                         f"(https and socks5h too), not {value!r}")
    return value


class WechatConfig(_Section):
    enabled: bool = False
    base_url: str = ""                  # empty = the official host, or the one the login returned


class WechatMpConfig(_Section):
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    path: str = "/wechat"
    app_id: str = ""
    api_base: str = "https://api.weixin.qq.com"
    # A signed push is accepted once, and only this close to our clock (seconds, either way).
    replay_window: float = Field(60.0, gt=0, le=300)


class ConsoleConfig(_Section):
    enabled: bool = True
    user: str = ""                      # the terminal user's name; empty = $USER


class ChannelsConfig(_Section):
    console: ConsoleConfig = ConsoleConfig()
    telegram: TelegramConfig = TelegramConfig()
    wechat: WechatConfig = WechatConfig()
    wechat_mp: WechatMpConfig = WechatMpConfig()


class SchedulerConfig(_Section):
    close_tasks_minutes: float = Field(10.0, gt=0, le=10_080)
    evolve_skills_minutes: float = Field(30.0, gt=0, le=10_080)
    fts_rebuild_minutes: float = Field(15.0, gt=0, le=10_080)
    retry_ingest_minutes: float = Field(5.0, gt=0, le=10_080)


class RemindersConfig(_Section):
    """Reminders and follow-ups (bot/reminders/)."""

    timezone: str = "UTC"               # the zone of people who have not set theirs with /timezone (IANA name)
    poll_seconds: float = Field(15.0, gt=0, le=3600)  # the longest wait between two looks for due reminders
    late_after_seconds: float = Field(60.0, ge=1, le=86_400)  # a reminder sent later than this says it is late
    quiet_hours: str = "22:00-08:00"    # follow-up questions are never asked in these local hours
    followup_days: float = Field(3.0, gt=0, le=30)  # a plan or event is asked about up to this many days after it

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v.strip())
        except (ValueError, OSError, KeyError):
            raise ValueError(f"reminders.timezone: no time zone named {v!r} (use an IANA name such as Asia/Shanghai)") from None
        return v.strip()

    @field_validator("quiet_hours")
    @classmethod
    def _quiet(cls, v: str) -> str:
        import re

        if not re.fullmatch(r"([01]?\d|2[0-3]):[0-5]\d-([01]?\d|2[0-3]):[0-5]\d", v.strip()):
            raise ValueError(f"reminders.quiet_hours must look like 22:00-08:00, not {v!r}")
        return v.strip()


class ApiConfig(_Section):
    enabled: bool = True                # `memgate run` serves the HTTP API (chat: with --api)
    host: str = "127.0.0.1"             # loopback only by default: put a TLS proxy in front to expose it
    port: int = Field(default=8765, ge=0, le=65535)  # 0 = any free port
    max_body_mb: float = Field(default=4.0, gt=0, le=512)
    rate_limit_per_minute: float = Field(default=600.0, gt=0, le=1_000_000)   # per key, refilled continuously
    rate_limit_burst: int = Field(default=60, ge=1, le=100_000)             # requests a key may make at once
    session_idle_minutes: float = Field(default=30.0, gt=0, le=10080)  # dashboard login ends after this idle time
    # The https address a TLS proxy serves this API at: its host is answered, its origin may log
    # in, and the session cookie is then Secure. Empty = loopback only.
    public_url: str = ""
    allowed_hosts: tuple[str, ...] = ()  # more host names to answer (besides loopback and public_url's)
    login_per_minute: float = Field(default=10.0, gt=0, le=10_000)   # dashboard logins per key and per client
    login_burst: int = Field(default=10, ge=1, le=10_000)           # logins at once, per key and per client
    sessions_per_key: int = Field(default=20, ge=1, le=10_000)      # a key's live logins; its own oldest ends first
    streams_per_key: int = Field(default=8, ge=1, le=1000)           # chat event streams one key holds open (429 past it)

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        v = v.strip().rstrip("/")
        if v:
            parts = urlsplit(v)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
                raise ValueError("api.public_url must be an origin such as https://memory.example.com")
        return v


class DeliveryConfig(_Section):
    retry_base_seconds: float = Field(1.0, gt=0, le=60)  # first retry of a failed send; doubles each time
    retry_cap_seconds: float = Field(300.0, gt=0, le=86400)  # the longest wait between two attempts
    give_up_hours: float = Field(24.0, gt=0, le=720)  # a reply still failing after this is closed
    storage_retry_seconds: float = Field(5.0, gt=0, le=3600)  # how often a turn held back by a full disk is retried
    keep_receipts_days: float = Field(7.0, ge=1, le=365)  # finished inbox/outbox rows (no text) are pruned after this


class StoreConfig(_Section):
    # "" = DuckDB at <data_dir>/memgate.duckdb; or duckdb:///abs/path.duckdb, or
    # postgresql://user@host:port/db (password from MEMGATE_STORE_PASSWORD or PGPASSWORD only).
    url: str = ""
    # Several processes on one PostgreSQL: how often a standby checks whether the receiver of a
    # bot died, and adopts the conversations dead processes left.
    takeover_seconds: float = Field(1.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _parsable(cls, v: str) -> str:
        if v.strip():
            try:
                parse_store_url(v)
            except StoreError as exc:
                raise ValueError(str(exc)) from None
        return v.strip()


class Settings(_Section):
    data_dir: str = "~/.local/share/memgate"
    env_file: str = ""                  # secrets as KEY=VALUE lines (mode 0600); the environment wins
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_max_mb: float = Field(10.0, gt=0, le=10_240)   # memgate.log is rotated at this size ...
    log_backups: int = Field(5, ge=0, le=100)          # ... keeping this many old files (.1 newest)
    llm: LLMConfig = LLMConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    memory: MemoryConfig = MemoryConfig()
    agent: AgentConfig = AgentConfig()
    speech: SpeechConfig = SpeechConfig()
    media: MediaConfig = MediaConfig()
    access: AccessConfig = AccessConfig()
    channels: ChannelsConfig = ChannelsConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    api: ApiConfig = ApiConfig()
    store: StoreConfig = StoreConfig()
    delivery: DeliveryConfig = DeliveryConfig()
    reminders: RemindersConfig = RemindersConfig()
    # Secrets, from the environment only (never from the file, never logged).
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, v: object) -> object:
        return v.strip().upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.embedding.provider == "litellm" and not self.embedding.model:
            raise ValueError("embedding.model is required when embedding.provider = 'litellm'")
        if self.embedding.provider == "local" and self.embedding.dim != 384:
            raise ValueError("embedding.dim must be 384 for the local model")
        if self.memory.llm_model and self.llm.memory_model:
            raise ValueError("set llm.memory_model (another model on llm.api_base's server) or memory.llm_model (a "
                             "model with its own address, memory.llm_api_base), not both")
        if (self.memory.llm_api_base or self.memory.llm_concurrency) and not self.memory.llm_model:
            raise ValueError("memory.llm_api_base and memory.llm_concurrency need memory.llm_model (the model there)")
        return self

    @property
    def data_path(self) -> Path:
        return Path(os.path.expanduser(self.data_dir))

    @property
    def db_path(self) -> Path:
        return self.data_path / "memgate.duckdb"

    @property
    def store_url(self) -> str:
        """The database: `[store] url`, or the DuckDB file in the data folder."""
        return self.store.url or duckdb_url(self.db_path)

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm.model or self.llm.api_base)

    def secret(self, name: str) -> str | None:
        return self.secrets.get(name) or None
