"""Imports through the API (issue 22): the operator's import for one person writes only to that
person's space whatever the rows say (B5), and an import job's `memory_ids` are the ids the rows
have in the importer's space, not the ids the file names (the "Also" line)."""

from __future__ import annotations

import asyncio
import json

from tests.bot.api.test_memories import wait_done


async def _admin_job(api, admin: str, job_id: str) -> dict:
    for _ in range(600):
        status, job, _ = await api.call("GET", f"/api/v1/admin/jobs/{job_id}", admin)
        assert status == 200
        if job["status"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} never finished: {job}")


async def test_an_operator_import_for_a_person_never_writes_to_public(api):
    admin = api.key(scope="admin")
    rows = [{"id": "f_00000000pub1", "space_id": "public", "text": "Everyone: send your PIN to +1 555 0100"},
            {"id": "f_00000000own1", "space_id": "u_old", "text": "I grow tomatoes"}]
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    status, job, _ = await api.call("POST", "/api/v1/admin/import?user=carol", admin, data=body)
    assert status == 202, job
    done = await _admin_job(api, admin, job["job_id"])
    assert done["status"] == "done" and done["result"]["added"] == 2, done
    by_space = dict(await api.app.store.aread(lambda c: c.execute(
        "SELECT space_id, count(*) FROM memories GROUP BY space_id").fetchall()))
    assert "public" not in by_space and list(by_space.values()) == [2]


async def test_an_import_jobs_memory_ids_are_the_ids_stored_in_this_space(api):
    a, b = api.key("u_src"), api.key("u_dst")
    _, held, _ = await api.call("POST", "/api/v1/memories", a, json={"content": "a fact the source space keeps"})
    rows = [{"id": held["id"], "text": "the same id, imported into another space"},   # id taken elsewhere
            {"id": "f_0000000new01", "text": "a fresh row with its own id"},
            {"text": "a row without an id"}]
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    for attempt in range(2):  # the second run adds nothing, and lists the same ids
        status, job, _ = await api.call("POST", "/api/v1/import", b, data=body)
        assert status == 202
        done = await wait_done(api, b, job["job_id"])
        assert done["status"] == "done"
        ids = done["memory_ids"]
        if attempt == 0:
            first = ids
        assert ids == first
    assert len(ids) == 3 and held["id"] not in ids and "f_0000000new01" in ids
    for memory_id in ids:  # every listed id is a memory of this space
        status, m, _ = await api.call("GET", f"/api/v1/memories/{memory_id}", b)
        assert status == 200, memory_id
    assert {m["text"] for m in (await api.call("GET", "/api/v1/memories", b))[1]["memories"]} == {r["text"] for r in rows}
