"""Issue 22 B11: jieba's dictionary cache is read from the data folder only, never from the shared
/tmp (where any local account can plant one), and it is private (folder 0700, file 0600).

Each case runs in a fresh interpreter (jieba's tokenizer is loaded once per process) with TMPDIR
pointing at a folder that plays the shared /tmp, holding a planted cache that would change the
words jieba finds: "张伟在北京见面" as one word of huge frequency, so neither 张伟 nor 北京 is found.
"""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path

import jieba
import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = "我和张伟在北京见面"

PROBE = """
import json, os, sys
from pathlib import Path
os.umask(0)   # the loosest umask: modes must not depend on it
data = sys.argv[1]
if data:
    from memory.text import set_jieba_cache_dir
    set_jieba_cache_dir(Path(data) / "cache")
from memory.insight import entities
from memory.text import tokenize
found = sorted([e.label, e.kind] for e in entities(sys.argv[2]))
print(json.dumps({"entities": found, "tokens": tokenize(sys.argv[2])}))
"""


def _plant(folder: Path) -> None:
    """A poisoned cache where jieba looks by default (tempfile.gettempdir()/jieba.cache)."""
    freq = {"张伟在北京见面": 10**9}
    for i in range(1, len("张伟在北京见面")):
        freq.setdefault("张伟在北京见面"[:i], 0)
    with open(folder / "jieba.cache", "wb") as f:
        marshal.dump((freq, 10**9), f)
    os.chmod(folder / "jieba.cache", 0o666)


def _run(tmp: Path, data: str) -> dict:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE, data, TEXT], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_planted_shared_cache_really_changes_jieba(tmp_path):
    """The attack the test defends against works on jieba's own default tokenizer."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    _plant(shared)
    tk = jieba.Tokenizer()
    tk.tmp_dir = str(shared)
    assert "张伟在北京见面" in tk.lcut(TEXT)


@pytest.mark.parametrize("with_data_folder", [True, False])
def test_insight_and_tokens_never_read_the_shared_tmp_cache(tmp_path, with_data_folder):
    shared, data = tmp_path / "tmp", tmp_path / "data"
    shared.mkdir()
    _plant(shared)
    planted = (shared / "jieba.cache").read_bytes()
    got = _run(shared, str(data) if with_data_folder else "")
    assert ["张伟", "person"] in got["entities"] and ["北京", "place"] in got["entities"], got
    assert "张伟" in got["tokens"] and "北京" in got["tokens"], got
    assert (shared / "jieba.cache").read_bytes() == planted   # neither read nor rewritten
    if with_data_folder:
        cache = data / "cache" / "jieba.cache"
        assert stat.S_IMODE(os.stat(cache).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(cache.parent).st_mode) == 0o700
        # The second start loads our own cache (and still finds the same entities).
        assert _run(shared, str(data)) == got
    else:
        # Without a data folder: a private folder of the process's own, gone when it exits.
        assert [p.name for p in shared.iterdir()] == ["jieba.cache"]


def test_a_looser_cache_left_in_the_data_folder_is_made_private(tmp_path):
    shared, data = tmp_path / "tmp", tmp_path / "data"
    shared.mkdir()
    _run(shared, str(data))
    cache = data / "cache" / "jieba.cache"
    os.chmod(cache, 0o644)
    os.chmod(cache.parent, 0o755)
    _run(shared, str(data))
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cache.parent).st_mode) == 0o700
