"""The memories contract: 201 explicit memory, 202 turn -> job done -> memory listed, filters,
pagination totals, recall with scores, If-Match (412 on stale), forget."""

from __future__ import annotations

import asyncio

from bot.api.jobs import load_job


async def wait_done(api, key: str, job_id: str) -> dict:
    """Poll the job until the worker has finished it (the worker is woken by the capture)."""
    for _ in range(600):
        status, job, _ = await api.call("GET", f"/api/v1/jobs/{job_id}", key)
        assert status == 200
        if job["status"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} never finished: {job}")


async def test_turn_is_queued_then_done_then_listed(api):
    key = api.key("u_alice")
    turn = {"messages": [{"role": "user", "content": "I moved to Lisbon last spring"},
                         {"role": "assistant", "content": "Lisbon is lovely in May."}], "session_id": "s1"}
    status, body, headers = await api.call("POST", "/api/v1/memories", key, json=turn)
    assert status == 202 and headers["Location"] == f"/api/v1/jobs/{body['job_id']}"
    job = await wait_done(api, key, body["job_id"])
    assert job["status"] == "done" and len(job["memory_ids"]) == 2
    status, page, _ = await api.call("GET", "/api/v1/memories?kind=chunk", key)
    assert {m["id"] for m in page["memories"]} == set(job["memory_ids"])
    assert {m["text"] for m in page["memories"]} == {"I moved to Lisbon last spring", "Lisbon is lovely in May."}
    # The same queue as chat turns: the row is in ingest_queue, keyed by the job id.
    row = api.app.store.read(lambda c: c.execute("SELECT space_id, status FROM ingest_queue WHERE turn_id = ?",
                                                 [body["job_id"]]).fetchone())
    assert row == ("u_alice", "done")


async def test_explicit_memory_is_201_with_the_full_shape(api):
    key = api.key()
    status, m, headers = await api.call("POST", "/api/v1/memories", key,
                                        json={"content": "My sister is called Ana", "pinned": True, "tags": ["family"]})
    assert status == 201 and headers["ETag"] == '"1"'
    assert set(m) == {"id", "kind", "text", "title", "category", "tags", "pinned", "status", "created_at", "updated_at",
                      "version", "superseded_by", "sources"}
    assert m["kind"] == "fact" and m["pinned"] is True and m["tags"] == ["family"] and m["version"] == 1
    status, got, _ = await api.call("GET", f"/api/v1/memories/{m['id']}", key)
    assert status == 200 and got == m


async def test_bad_bodies_are_400(api):
    key = api.key()
    for body in ({}, {"messages": []}, {"messages": [{"role": "system", "content": "x"}]}, {"content": ""},
                 {"content": "x", "pinned": "yes"}, {"content": "x", "tags": "a"}, [1, 2]):
        status, err, _ = await api.call("POST", "/api/v1/memories", key, json=body)
        assert status == 400 and err["error"]["code"] == "bad_request", body


async def test_filters_and_pagination_totals(api):
    key = api.key()
    for i in range(7):
        await api.call("POST", "/api/v1/memories", key, json={"content": f"note number {i}", "pinned": i < 2,
                                                              "tags": ["even" if i % 2 == 0 else "odd"]})
    status, page, _ = await api.call("GET", "/api/v1/memories?limit=3&offset=0", key)
    assert page["total"] == 7 and len(page["memories"]) == 3 and page["limit"] == 3
    assert [m["pinned"] for m in page["memories"]][:2] == [True, True]
    _, last, _ = await api.call("GET", "/api/v1/memories?limit=3&offset=6", key)
    assert last["total"] == 7 and len(last["memories"]) == 1
    seen = {m["id"] for o in (0, 3, 6) for m in (await api.call("GET", f"/api/v1/memories?limit=3&offset={o}", key))[1]["memories"]}
    assert len(seen) == 7
    _, even, _ = await api.call("GET", "/api/v1/memories?tag=even", key)
    assert even["total"] == 4
    _, pinned, _ = await api.call("GET", "/api/v1/memories?pinned=true", key)
    assert pinned["total"] == 2
    _, none, _ = await api.call("GET", "/api/v1/memories?until=2000-01-01", key)
    assert none["total"] == 0
    for bad in ("limit=201", "limit=0", "offset=-1", "pinned=maybe", "since=yesterday", "kind=planet"):
        assert (await api.call("GET", f"/api/v1/memories?{bad}", key))[0] == 400, bad


async def test_search_is_recall_with_scores(api):
    key = api.key()
    for text in ("I play the cello on Sundays", "My dog Rex loves the beach", "I work as a nurse in Porto"):
        await api.call("POST", "/api/v1/memories", key, json={"content": text})
    _, page, _ = await api.call("GET", "/api/v1/memories?q=what instrument do I play", key)
    assert page["memories"][0]["text"] == "I play the cello on Sundays"
    assert all(0 <= m["score"] <= 1 for m in page["memories"]) and page["total"] >= 1


async def test_patch_with_if_match_and_stale_version_is_412(api):
    key = api.key()
    _, m, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "I like green tea"})
    path = f"/api/v1/memories/{m['id']}"
    status, v2, headers = await api.call("PATCH", path, key, json={"text": "I like oolong tea", "pinned": True},
                                         headers={"If-Match": '"1"'})
    assert status == 200 and v2["version"] == 2 and v2["text"] == "I like oolong tea" and headers["ETag"] == '"2"'
    status, err, headers = await api.call("PATCH", path, key, json={"tags": ["tea"]}, headers={"If-Match": '"1"'})
    assert status == 412 and err["error"]["code"] == "precondition_failed" and headers["ETag"] == '"2"'
    _, now, _ = await api.call("GET", path, key)
    assert now["tags"] == ["api"] and now["version"] == 2  # the refused edit changed nothing
    # the new text is what recall finds now
    _, page, _ = await api.call("GET", "/api/v1/memories?q=oolong", key)
    assert page["memories"] and page["memories"][0]["id"] == m["id"]
    assert (await api.call("PATCH", path, key, json={"kind": "chunk"}))[0] == 400


async def test_delete_is_forget(api):
    key = api.key()
    _, m, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "my locker code is 4512"})
    path = f"/api/v1/memories/{m['id']}"
    status, body, _ = await api.call("DELETE", path, key)
    assert status == 200 and body["forgotten"] == [m["id"]]
    _, page, _ = await api.call("GET", "/api/v1/memories?q=locker code", key)
    assert m["id"] not in {x["id"] for x in page["memories"]}
    assert (await api.call("DELETE", path, key))[0] == 404
    assert (await api.call("PATCH", path, key, json={"pinned": True}))[0] == 404
    # Forgotten is gone for the API (issue 24): a 404 with the error shape, not a 200 tombstone.
    status, err, _ = await api.call("GET", path, key)
    assert status == 404 and err["error"]["code"] == "not_found" and "locker" not in str(err)


async def test_unknown_job_is_404_and_jobs_are_per_space(api):
    a, b = api.key("u_a"), api.key("u_b")
    _, body, _ = await api.call("POST", "/api/v1/memories", a, json={"messages": [{"role": "user", "content": "hi there"}]})
    assert (await api.call("GET", f"/api/v1/jobs/{body['job_id']}", b))[0] == 404
    assert (await api.call("GET", "/api/v1/jobs/j_nope", a))[0] == 404
    assert api.app.store.read(lambda c: load_job(c, "u_b", body["job_id"])) is None


async def test_search_pages_rank_one_page_ahead_and_say_when_the_total_is_exact(api):
    key = api.key()
    for n in range(8):
        await api.call("POST", "/api/v1/memories", key, json={"content": f"Garden note {n}: the tomatoes in bed {n} need water",
                                                               "tags": ["garden"] if n % 2 else []})
    _, whole, _ = await api.call("GET", "/api/v1/memories?q=tomatoes need water&limit=50", key)
    assert whole["total_exact"] is True and whole["total"] == len(whole["memories"]) >= 6
    seen, offset, page = [], 0, {"total_exact": False}
    while not page["total_exact"]:
        _, page, _ = await api.call("GET", f"/api/v1/memories?q=tomatoes need water&limit=3&offset={offset}", key)
        seen += [m["id"] for m in page["memories"]]
        if not page["total_exact"]:
            assert page["total"] == offset + 4 and len(page["memories"]) == 3  # "at least one more"
        offset += 3
    assert seen == [m["id"] for m in whole["memories"]] and page["total"] == whole["total"]
    # A filter recall cannot apply ranks deep and counts exactly what matches.
    _, tagged, _ = await api.call("GET", "/api/v1/memories?q=tomatoes need water&limit=2&tag=garden", key)
    assert tagged["total_exact"] is True and tagged["total"] == 4 and len(tagged["memories"]) == 2
    assert all("garden" in m["tags"] for m in tagged["memories"])
