"""The one-time codes people read aloud and retype: DM pairing codes and /link codes.

8 characters from an alphabet without 0/O/1/I; what a person types back is normalised (case,
spaces and dashes) before it is compared; a new code is drawn again until no row of its table
holds it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from memory.store.connection import Conn

# No 0/O/1/I: codes are read aloud and retyped by people.
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8


def new_code(choice: Callable[[str], str] = secrets.choice) -> str:
    """An 8-character code from CODE_ALPHABET (no 0/O/1/I); `choice` is injectable for tests."""
    return "".join(choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What a person typed -> the stored form: upper case, spaces and dashes dropped."""
    return re.sub(r"[\s\-]", "", text).upper()


def unique_code(con: Conn, table: str) -> str:
    """A new code that no row of `table` (pairing_requests, link_offers) holds yet."""
    while True:
        code = new_code()
        if con.execute(f"SELECT 1 FROM {table} WHERE code = ?", [code]).fetchone() is None:
            return code
