"""What the iLink channel keeps on disk: the bot credentials, the receive cursor, the context tokens.

All three live in the data folder, written atomically and readable by the owner only (mode
600: the credentials hold the bot token, the other two name the people who wrote). The cursor
and the context tokens belong to one bot account: each file records its `ilink_bot_id`, and a
file of another account reads as empty, so a new login never resumes someone else's stream.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from adapters.wechat.ilink.protocol import Credentials

__all__ = [
    "CONTEXT_TOKENS_FILE",
    "CREDENTIALS_FILE",
    "CURSOR_FILE",
    "credentials_path",
    "file_stamp",
    "load_context_tokens",
    "load_credentials",
    "load_cursor",
    "save_context_tokens",
    "save_credentials",
    "save_cursor",
    "write_private",
]

CREDENTIALS_FILE = "wechat_credentials.json"
CURSOR_FILE = "wechat_sync.json"
CONTEXT_TOKENS_FILE = "wechat_context_tokens.json"


def credentials_path(data_dir: Path) -> Path:
    """Where the bot credentials live inside the data folder."""
    return Path(data_dir) / CREDENTIALS_FILE


def load_credentials(data_dir: Path) -> Credentials | None:
    """The stored credentials, or None when there are none (or they are unreadable)."""
    try:
        return Credentials.from_json(credentials_path(data_dir).read_text(encoding="utf-8"))
    except OSError:
        return None


def save_credentials(data_dir: Path, creds: Credentials) -> Path:
    """Write the credentials atomically, readable by the owner only (mode 600)."""
    path = credentials_path(data_dir)
    write_private(path, creds.to_json())
    return path


def load_cursor(data_dir: Path, bot_id: str) -> str:
    """The saved `get_updates_buf` of this bot account; "" when there is none."""
    cursor = _load_state(Path(data_dir) / CURSOR_FILE, bot_id).get("get_updates_buf", "")
    return cursor if isinstance(cursor, str) else ""


def save_cursor(data_dir: Path, bot_id: str, cursor: str) -> None:
    """Save the cursor durably (fsynced): it is what tells the server which messages we have."""
    state = {"ilink_bot_id": bot_id, "get_updates_buf": cursor}
    write_private(Path(data_dir) / CURSOR_FILE, json.dumps(state))


def load_context_tokens(data_dir: Path, bot_id: str) -> dict[str, str]:
    """user id -> latest context_token of this bot account; {} when there are none."""
    tokens = _load_state(Path(data_dir) / CONTEXT_TOKENS_FILE, bot_id).get("tokens", {})
    return {str(k): str(v) for k, v in tokens.items()} if isinstance(tokens, dict) else {}


def save_context_tokens(data_dir: Path, bot_id: str, tokens: dict[str, str]) -> None:
    """Save the context tokens atomically (the cursor save right after is the fsynced one)."""
    state = {"ilink_bot_id": bot_id, "tokens": tokens}
    write_private(Path(data_dir) / CONTEXT_TOKENS_FILE, json.dumps(state), durable=False)


def _load_state(path: Path, bot_id: str) -> dict[str, Any]:
    """A state file of this bot account; {} when absent, unreadable or another bot's."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("ilink_bot_id") != bot_id:
        return {}
    return data


def write_private(path: Path, text: str, *, durable: bool = True) -> None:
    """Atomically replace `path` with `text`; the file is created 0600 and never exists wider.

    `durable` adds an fsync, so the new content also survives a power cut (os.replace alone
    already survives a crash of this process).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        # os.open's mode is filtered by the umask; make sure nothing looser survives on reuse.
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fd = -1
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(tmp, path)


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a rewritten file apart: mtime, inode (os.replace makes a new one) and size."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_size)
