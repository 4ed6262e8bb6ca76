"""jieba, loaded once per process, with its dictionary cache where no one else can write it.

jieba keeps a marshal dump of its prefix dictionary and loads it, unchecked, whenever the file
exists: by default `/tmp/jieba.cache`, which any local account can plant (issue 22 B11). Every
jieba user in memgate goes through this module: tokenising (memory.text) and part-of-speech
tagging (memory.insight).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path


class _Jieba:
    """The process's one jieba tokenizer (and its part-of-speech tagger), loaded lazily.

    jieba keeps a marshal dump of its prefix dictionary and loads it, unchecked, whenever the file
    exists: by default `/tmp/jieba.cache`, which any local account can plant. Ours lives in the
    data folder (`<data>/cache/jieba.cache`, folder 0700, file 0600 whatever the umask); without a
    data folder, in a fresh folder of this process's own. No jieba user may go through jieba's
    module-level tokenizers (`jieba.cut`, `jieba.posseg.cut`): they read the shared file.
    """

    def __init__(self) -> None:
        self._tk = None
        self._pos = None
        self._lock = threading.Lock()
        self.cache_dir: Path | None = None

    def get(self):
        """The tokenizer (cut, lcut, cut_for_search)."""
        if self._tk is None:
            with self._lock:
                if self._tk is None:
                    import jieba

                    jieba.setLogLevel(logging.WARNING)
                    tk = jieba.Tokenizer()
                    folder = _private_dir(self.cache_dir)
                    tk.tmp_dir = str(folder)
                    tk.cache_file = str(folder / "jieba.cache")
                    tk.initialize()
                    _private_file(Path(tk.cache_file))
                    self._tk = tk
        return self._tk

    def pos(self):
        """The part-of-speech tagger over the same tokenizer (same dictionary, same cache)."""
        if self._pos is None:
            tk = self.get()
            with self._lock:
                if self._pos is None:
                    from jieba.posseg import POSTokenizer

                    self._pos = POSTokenizer(tk)
        return self._pos


def _private_dir(folder: Path | None) -> Path:
    """`folder` made (0700) or, for None, a new private folder removed at exit."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="memgate-jieba-"))
        atexit.register(shutil.rmtree, folder, True)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def _private_file(path: Path) -> None:
    """jieba writes its cache through mkstemp (0600); one left by an older version may be looser."""
    try:
        os.chmod(path, 0o600)
    except FileNotFoundError:  # jieba could not write it (logged by jieba): nothing to protect
        pass


_jieba = _Jieba()


def jieba_tokenizer():
    """The process's jieba tokenizer (cut, lcut, cut_for_search), its cache private."""
    return _jieba.get()


def set_jieba_cache_dir(path: Path) -> None:
    """Keep jieba's dictionary cache under `path` (our data folder) instead of /tmp."""
    _jieba.cache_dir = Path(path)


def pos_tags(text: str) -> list[tuple[str, str]]:
    """jieba's words of `text` with their part-of-speech flags (nr person, ns place, ...)."""
    return [(w.word, w.flag) for w in _jieba.pos().cut(text)]
