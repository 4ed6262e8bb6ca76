"""Embedding cost is bounded per text, and a long passage run never holds a query up beyond one
batch (one shared lock held for a whole 30k-character message used to stall every recall)."""

from __future__ import annotations

import threading
import time

import numpy as np
from hypothesis import given, strategies as st



@given(st.text(max_size=3000), st.integers(10, 500), st.integers(1, 6))
def test_pieces_are_bounded_in_size_and_number_and_come_from_the_text(text, size, limit):
    from memory.embed import pieces

    got = pieces(text, size, limit)
    assert 1 <= len(got) <= limit
    assert all(len(p) <= size for p in got)
    assert all(p in text for p in got)
    if len(text) <= size:
        assert got == [text]
    else:
        assert got[0] == text[: len(got[0])]
        assert limit == 1 or text.endswith(got[-1])


def test_a_huge_text_costs_at_most_max_pieces_model_inputs(embedder):
    huge = "I keep bees on the roof and sell the honey at the market. " * 20_000  # 1.2 MB
    vec = embedder.embed_passages([huge, "short one"])
    assert vec.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-5)
    # The long text's vector still says what it is about.
    q = embedder.embed_query("who keeps bees?")
    other = embedder.embed_query("what is the capital of Peru?")
    assert float(vec[0] @ q) > float(vec[0] @ other)


def test_a_query_waits_for_at_most_one_batch_of_a_long_passage_run(embedder):
    texts = [f"passage {i}: " + "words about gardening and tomatoes " * 11 for i in range(20)]  # two batches
    order: list[str] = []

    def long_run() -> None:
        embedder.embed_passages(texts)
        order.append("passages")

    runner = threading.Thread(target=long_run)
    runner.start()
    # Observe, not sleep: wait until the run holds the model, then ask a query.
    while not embedder._lock.locked():
        time.sleep(0.001)
    embedder.embed_query("unrelated question about the weather in Oslo?")
    order.append("query")
    runner.join()
    assert order == ["query", "passages"]


class _Counting:
    """The real engine, counting its calls."""

    def __init__(self, model) -> None:
        self.model, self.queries = model, 0

    def query(self, text):
        self.queries += 1
        return self.model.query(text)

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_a_repeated_query_is_not_embedded_again(embedder):
    counting = _Counting(embedder._model)
    embedder._model = counting
    try:
        first = embedder.embed_query("what did Caroline paint last summer?")
        again = embedder.embed_query("what did Caroline paint last summer?")
        other = embedder.embed_query("what did Melanie paint last summer?")
    finally:
        embedder._model = counting.model
    assert counting.queries == 2
    assert again is first and not np.array_equal(first, other)
    # The key names the model: another model's vector for the same text is never served.
    assert embedder._cache.get(("litellm:some-other-model", "what did Caroline paint last summer?")) is None


def test_one_thread_or_all_give_the_same_vector_and_the_setting_is_restored(embedder):
    from memory.embed import LocalE5Embedder

    if embedder._omp is None:
        return  # an engine without its bundled OpenMP runtime: nothing to set
    before = embedder._omp.omp_get_max_threads()
    text = "which bakery downtown did Gina recommend for croissants?"
    one, every = LocalE5Embedder.__new__(LocalE5Embedder), LocalE5Embedder.__new__(LocalE5Embedder)
    for e, n in ((one, 1), (every, 2)):
        e.__dict__.update(embedder.__dict__)
        e._cache = type(embedder._cache)()
        e._query_threads = n
    assert np.allclose(one.embed_query(text), every.embed_query(text), atol=1e-6)
    assert embedder._omp.omp_get_max_threads() == before
