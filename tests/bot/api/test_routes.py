"""The rest of the contract: pulse, insight (cached until the space changes), export/import,
tasks, skills, usage, health, metrics and the admin tree."""

from __future__ import annotations

import json

from bot.message import Message
from tests.bot.api.test_memories import wait_done


async def test_pulse_buckets_kinds_categories_tags(api):
    key = api.key()
    for i in range(3):
        await api.call("POST", "/api/v1/memories", key, json={"content": f"pulse note {i}", "tags": ["t1", f"x{i % 2}"]})
    status, p, _ = await api.call("GET", "/api/v1/pulse?bucket=day", key)
    assert status == 200 and p["total"] == 3 and len(p["buckets"]) >= 30
    today = [b for b in p["buckets"] if b["count"]]
    assert len(today) == 1 and today[0]["by_kind"] == {"fact": 3} and today[0]["by_category"] == {"about_you": 3}
    assert p["top_tags"][0] == {"tag": "t1", "count": 3}
    _, w, _ = await api.call("GET", "/api/v1/pulse?bucket=week", key)
    assert w["total"] == 3 and len(w["buckets"]) in (5, 6)
    for bad in ("bucket=hour", "since=2026-02-01&until=2026-01-01", "since=2000-01-01&until=2026-01-01"):
        assert (await api.call("GET", f"/api/v1/pulse?{bad}", key))[0] == 400, bad


async def test_insight_graph_with_lift_and_cache(api):
    key = api.key()
    ids = []
    for text in ("Ana lives in Lisbon", "Ana visited Lisbon in March", "Bruno works at Acme in Porto", "我和张伟在北京见面"):
        ids.append((await api.call("POST", "/api/v1/memories", key, json={"content": text}))[1]["id"])
    status, g, headers = await api.call("GET", "/api/v1/insight", key)
    assert status == 200 and headers["X-Cache"] == "miss"
    labels = {n["label"]: n for n in g["nodes"]}
    assert labels["Ana"]["count"] == 2 and "北京" in labels and labels["张伟"]["kind"] == "person"
    edge = next(e for e in g["edges"] if {e["source"], e["target"]} == {"name:ana", "name:lisbon"})
    assert edge["weight"] == 2 and edge["lift"] == 2.0 and set(edge["evidence"]) == set(ids[:2])
    assert (await api.call("GET", "/api/v1/insight", key))[2]["X-Cache"] == "hit"
    await api.call("DELETE", f"/api/v1/memories/{ids[0]}", key)
    status, g2, headers = await api.call("GET", "/api/v1/insight", key)
    assert headers["X-Cache"] == "miss"
    assert {n["label"]: n["count"] for n in g2["nodes"]}["Ana"] == 1


async def test_export_then_import_is_idempotent(api):
    a, b = api.key("u_src"), api.key("u_dst")
    for text in ("first exported fact", "second exported fact"):
        await api.call("POST", "/api/v1/memories", a, json={"content": text})
    status, jsonl, headers = await api.call("GET", "/api/v1/export?format=jsonl", a)
    assert status == 200 and headers["Content-Type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in jsonl.splitlines()]
    assert {r["text"] for r in rows} == {"first exported fact", "second exported fact"}
    _, md, _ = await api.call("GET", "/api/v1/export?format=markdown", a)
    assert md.startswith("# Memories of u_src") and "first exported fact" in md
    # Same space twice: the second import adds nothing.
    for _ in range(2):
        status, job, _ = await api.call("POST", "/api/v1/import", a, data=jsonl.encode())
        assert status == 202
        done = await wait_done(api, a, job["job_id"])
        assert done["status"] == "done" and done["kind"] == "import"
    assert (await api.call("GET", "/api/v1/memories", a))[1]["total"] == 2
    # Another space: the rows land in the importer's space, never in the file's.
    _, job, _ = await api.call("POST", "/api/v1/import", b, data=jsonl.encode())
    await wait_done(api, b, job["job_id"])
    assert (await api.call("GET", "/api/v1/memories", b))[1]["total"] == 2
    assert (await api.call("GET", "/api/v1/memories", a))[1]["total"] == 2
    assert (await api.call("POST", "/api/v1/import", a, data=b"not json\n"))[0] == 400


async def test_tasks_skills_usage(api):
    key = api.key()
    assert (await api.call("GET", "/api/v1/tasks", key))[1] == {"tasks": []}
    assert (await api.call("GET", "/api/v1/skills", key))[1] == {"skills": []}
    assert (await api.call("GET", "/api/v1/skills/nope", key))[0] == 404
    from memory.llm import charged_to

    usage = api.app.extras["usage"]
    with charged_to("u_alice"):
        usage.add("reply", "openai/gpt-4o-mini", True, 100, 20)
    with charged_to("u_bob"):
        usage.add("reply", "openai/gpt-4o-mini", True, 5000, 900)
    usage.add("tasks", "openai/gpt-4o-mini", True, 7, 7)  # a gateway job: no space
    status, u, _ = await api.call("GET", "/api/v1/usage", key)
    assert status == 200 and u["scope"] == "space"
    assert [(r["purpose"], r["calls"], r["prompt_tokens"], r["completion_tokens"]) for r in u["usage"]] == \
        [("reply", 1, 100, 20)]
    assert u["usage"][0]["cost"] > 0  # litellm knows gpt-4o-mini's price
    bob = (await api.call("GET", "/api/v1/usage", api.key("u_bob")))[1]["usage"]
    assert [(r["calls"], r["prompt_tokens"]) for r in bob] == [(1, 5000)]


async def test_healthz_and_metrics_need_no_key(api):
    key = api.key()
    await api.call("POST", "/api/v1/memories", key, json={"messages": [{"role": "user", "content": "count me"}]})
    status, h, _ = await api.call("GET", "/healthz")
    assert status == 200 and h["database"] == "ok" and isinstance(h["ingest_queue"], int) and h["channels"] == {}
    api.app.extras["usage"].add("ingest", "m", True, 7, 3)
    await api.call("GET", "/api/v1/memories?q=count", key)
    status, text, headers = await api.call("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for name in ("memgate_ingest_queue_depth", "memgate_recall_latency_seconds_count 1.0",
                 'memgate_llm_tokens_total{purpose="ingest",type="prompt"} 7.0', "memgate_turn_latency_seconds"):
        assert name in text, name


def _dm(sender: str) -> Message:
    from datetime import UTC, datetime

    return Message(channel="telegram", chat_id=sender, sender_id=sender, text="hello", timestamp=datetime.now(UTC),
                   sender_name=f"person {sender}")


async def test_admin_pairing_users_jobs_stats_public(api):
    admin = api.key(scope="admin")
    access = api.app.access
    await access.check(_dm("111"))
    await access.check(_dm("222"))
    _, reqs, _ = await api.call("GET", "/api/v1/admin/pairing", admin)
    codes = {r["identity"]: r["code"] for r in reqs["requests"]}
    assert set(codes) == {"telegram:111", "telegram:222"}
    status, ok, _ = await api.call("POST", f"/api/v1/admin/pairing/{codes['telegram:111']}/approve", admin)
    assert status == 200 and ok["approved"]["identity"] == "telegram:111"
    assert (await api.call("POST", f"/api/v1/admin/pairing/{codes['telegram:222']}/deny", admin))[0] == 200
    assert (await api.call("POST", "/api/v1/admin/pairing/ZZZZZZZZ/approve", admin))[0] == 404
    _, people, _ = await api.call("GET", "/api/v1/admin/users", admin)
    assert [u["identity"] for u in people["users"]] == ["telegram:111"]
    # The first approved person is the owner: their role cannot change.
    assert (await api.call("PATCH", "/api/v1/admin/users/telegram:111", admin, json={"blocked": True}))[0] == 409
    assert (await api.call("PATCH", "/api/v1/admin/users/telegram:999", admin, json={"role": "user"}))[0] == 404
    assert (await api.call("PATCH", "/api/v1/admin/users/telegram:111", admin, json={"role": "god"}))[0] == 400
    assert (await api.call("GET", "/api/v1/admin/jobs", admin))[0] == 200
    _, st, _ = await api.call("GET", "/api/v1/admin/stats", admin)
    assert st["identities"] == 1 and st["live_keys"] >= 2
    pub = await api.app.engine.remember("the office wifi is guest-net", api.app.access.PUBLIC_SPACE)
    _, listed, _ = await api.call("GET", "/api/v1/admin/public/memories", admin)
    assert [m["id"] for m in listed["memories"]] == [pub.id]
    assert (await api.call("DELETE", f"/api/v1/admin/public/memories/{pub.id}", admin))[0] == 200
    assert (await api.call("GET", "/api/v1/admin/public/memories", admin))[1]["total"] == 0


async def test_gateway_publishes_address_and_token_while_running(tmp_path, embedder):
    import aiohttp
    import os

    from bot.app import build_app
    from tests.bot.api.conftest import api_settings

    settings = api_settings(tmp_path)
    app = build_app(settings, embedder=embedder, serve_api=True)
    async with app:
        info = json.loads((settings.data_path / "api.json").read_text())
        token_file = settings.data_path / "api.token"
        assert os.stat(token_file).st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        async with aiohttp.ClientSession() as http:
            async with http.get(info["url"] + "/api/v1/admin/stats", headers={"X-API-Key": token}) as r:
                assert r.status == 200
    assert not (settings.data_path / "api.json").exists() and not token_file.exists()
    # The token died with the gateway.
    from bot.access.api_keys import Keys
    from bot.app import open_store

    store = open_store(settings)
    try:
        assert Keys(store, clock=app.clock).verify(token) is None
    finally:
        store.close()
