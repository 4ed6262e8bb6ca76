"""CPU per keyword search as rows pile up since the index's last build (the soak writes ~10k in
the 15 minutes between two rebuilds): a store of 2,000 indexed memories in 30 spaces, then
`--fresh` more written after the build, and 300 four-word searches of one space each, with the
store's postings cache (as recall, skill search and ingest's fact lookups search) and without.
Prints CPU ms per search (this process: DuckDB's threads included). Run it against another
checkout for the before: `PYTHONPATH=DIR python bench/keyword_fresh.py`.

    python bench/keyword_fresh.py [--fresh 1000,8000] [--searches 300]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import datetime

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from memory.store.connection import Store  # noqa: E402
from memory.store.keywords import keyword_search, rebuild_index  # noqa: E402
from memory.store.postings_cache import PostingsCache  # noqa: E402
from memory.store.rows import NewMemory, insert_memories  # noqa: E402

DIM = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", default="1000,8000", help="rows written since the build, comma-separated")
    parser.add_argument("--searches", type=int, default=300)
    args = parser.parse_args()
    print(f"code: {sys.modules['memory'].__path__[0]}; load {' '.join(open('/proc/loadavg').read().split()[:3])}")
    for fresh in (int(x) for x in args.fresh.split(",")):
        rnd = random.Random(1)
        words = [f"w{i}" for i in range(3000)]

        def rows(n: int) -> list[NewMemory]:
            return [NewMemory(space_id=f"s{rnd.randrange(30)}", kind=rnd.choice(["chunk", "fact"]), title="",
                              text=" ".join(rnd.choices(words, k=12)), created_at=datetime(2026, 1, 1)) for _ in range(n)]

        def write(store: Store, batch: list[NewMemory]) -> None:
            store.write(lambda c: insert_memories(c, batch, np.ones((len(batch), DIM), np.float32)))

        with Store(":memory:", DIM) as store:
            write(store, rows(2000))
            rebuild_index(store)
            for i in range(0, fresh, 500):
                write(store, rows(min(500, fresh - i)))
            queries = [(rnd.choices(words, k=4), f"s{rnd.randrange(30)}") for _ in range(args.searches + 1)]
            for cache in (PostingsCache(), None):
                terms, space = queries[0]
                store.read(lambda c: keyword_search(c, terms, [space], 20, cache=cache))  # warm
                t0 = time.process_time()
                for terms, space in queries[1:]:
                    store.read(lambda c, terms=terms, space=space: keyword_search(c, terms, [space], 20, cache=cache))
                ms = 1000 * (time.process_time() - t0) / args.searches
                print(f"fresh rows {fresh:>6}, {'with the postings cache' if cache else 'without a cache        '}: "
                      f"{ms:7.2f} ms CPU per search")


if __name__ == "__main__":
    main()
