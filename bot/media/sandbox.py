"""A PDF's text read in a child process with limits, so no file can stall or starve the gateway.

pypdf is pure Python: a 6 KB PDF whose pages share one compressed stream of text operators that
yield no text kept the event loop busy for over a minute per read (issue 31). Here each read is a
fresh `python -I` child that sets its own limits before it touches the file (address space:
`memory_mb`; CPU seconds: a little over `timeout`, a backstop for when the gateway itself dies)
and gets the bytes on stdin, the page and character caps in argv, no environment (no secret of
the gateway reaches the parser) and dies with its parent (PR_SET_PDEATHSIG). The parent waits at
most `timeout` seconds from the moment the child says it is ready, then kills it: `ReadLimit`, and the caller answers the file as
unreadable rather than trying it again. At most `max_children` reads run at once.

Plain text and Markdown are decoded in a thread instead (bot.media.documents): decoding is linear
in the capped download, and a process per text file would cost more than the read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bot.media.documents import DocumentError

log = logging.getLogger(__name__)

__all__ = ["PdfReaderLimits", "ReadLimit", "SandboxedPdf"]

_ROOT = str(Path(__file__).resolve().parents[2])  # the checkout memgate runs from (bot/ and memory/ live here)
STARTUP_S = 120.0  # at most this long for the child to start (or the read's own timeout, if longer)
READY = b"ready\n"
_CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); "
          "from bot.media.sandbox import child_main; child_main(sys.argv[2:])")


class ReadLimit(Exception):
    """The read ran out of time or memory: the file is not read again (`why` says which)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class PdfReaderLimits:
    timeout: float = 30.0          # seconds one read may take (`[media] read_timeout`)
    memory_mb: int = 512           # the child's address space (`[media] read_memory_mb`)
    max_children: int = 2          # reads at once (`[media] max_readers`)


class SandboxedPdf:
    """Reads PDFs in child processes, `limits.max_children` at a time."""

    def __init__(self, limits: PdfReaderLimits) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.max_children)
        self.reads = 0  # children started (the bench and tests count them)

    async def text(self, data: bytes, *, label: str, max_pages: int, max_chars: int) -> tuple[str, bool]:
        """(the text, whether a cap cut it); DocumentError for a PDF that cannot be read, ReadLimit
        when the read was stopped at a limit."""
        lim = self.limits
        async with self._slots:
            self.reads += 1
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-c", _CHILD, _ROOT, label, str(max_pages), str(max_chars),
                str(lim.memory_mb), str(int(lim.timeout) + 2),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={}, start_new_session=True)
            try:
                # The clock starts once the child is ready (started, limited, pypdf imported): on a
                # busy machine starting Python takes seconds, and that is not the file's doing.
                assert proc.stdout is not None and proc.stdin is not None
                ready = await asyncio.wait_for(proc.stdout.readline(), max(STARTUP_S, lim.timeout))
                if ready != READY:  # it could not start: the reader's trouble, not the file's
                    err = await proc.stderr.read() if proc.stderr is not None else b""
                    log.error("the PDF reader process did not start: %s", err.decode(errors="replace").strip()[-500:])
                    raise DocumentError(f"I could not read {label} just now: my PDF reader did not start.")
                out, err = await asyncio.wait_for(proc.communicate(data), lim.timeout)
            except TimeoutError:
                raise ReadLimit("time") from None
            finally:
                if proc.returncode is None:  # timed out, or the turn was cancelled: the child goes too
                    proc.kill()
                    await proc.wait()
        try:
            answer = json.loads(out)
        except ValueError:
            # Killed by its own limits (CPU: SIGXCPU; memory: a MemoryError past what it could report).
            log.warning("reading a PDF ended without an answer (exit %s): %s", proc.returncode,
                        err.decode(errors="replace").strip()[-300:])
            raise ReadLimit("memory" if b"MemoryError" in err else "time") from None
        if "limit" in answer:
            raise ReadLimit(answer["limit"])
        if "error" in answer:
            raise DocumentError(answer["error"])
        return answer["text"], bool(answer["cut"])


def child_main(argv: list[str]) -> None:
    """The child: limits first, then the bytes from stdin, the answer as one JSON object on stdout."""
    import resource

    label, max_pages, max_chars, memory_mb, cpu_seconds = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
    _die_with_parent()
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import pypdf  # noqa: F401 (imported before the clock starts: see SandboxedPdf.text)

    from bot.media.documents import pdf_text

    sys.stdout.buffer.write(READY)
    sys.stdout.buffer.flush()
    data = sys.stdin.buffer.read()
    try:
        text, cut = pdf_text(data, label, max_pages, max_chars)
        answer: dict = {"text": text, "cut": cut}
    except DocumentError as exc:
        answer = {"error": str(exc)}
    except MemoryError:
        answer = {"limit": "memory"}
    except RecursionError:
        answer = {"error": f"{label} looks damaged; I could not read it as a PDF (it nests too deeply)."}
    sys.stdout.buffer.write(json.dumps(answer).encode())
    sys.stdout.buffer.flush()
    os._exit(0)  # no interpreter teardown: nothing more to do, and it could meet the limits again


def _die_with_parent() -> None:
    """Linux: the kernel kills this child when the gateway dies (a SIGKILL leaves no one to do it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the call: nothing would kill us later
            os._exit(1)
    except (OSError, AttributeError):
        pass  # the CPU limit still ends it
