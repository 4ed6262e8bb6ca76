"""A memgate ingest worker in its own process (the crash test SIGKILLs it mid-batch).

    python tests/memory/ingest/ingest_child.py DB LLM_BASE_URL WORKERS [BATCH_TOKENS]
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memory.embed import LocalE5Embedder  # noqa: E402
from memory.engine import MemoryEngine  # noqa: E402
from memory.ingest.settings import IngestSettings  # noqa: E402
from memory.llm import LiteLLM, LLMSettings  # noqa: E402
from memory.store.connection import Store  # noqa: E402


async def main(db: str, base_url: str, workers: int, batch_tokens: int) -> None:
    store = Store(db, 384)
    llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=base_url, api_key="sk-test", timeout=3600, retries=0))
    engine = MemoryEngine(store, LocalE5Embedder(), llm, ingest_settings=IngestSettings(workers=workers, batch_tokens=batch_tokens))
    print("ready", flush=True)
    await engine.worker.drain()
    print("drained", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]),
                     int(sys.argv[4]) if len(sys.argv) > 4 else IngestSettings.batch_tokens))
