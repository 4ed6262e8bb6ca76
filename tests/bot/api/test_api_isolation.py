"""A key for space A never sees space B: for random space ids and every space route, nothing of
B (text or id) comes back to A's key, and B's ids are 'not found' for it."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

SPACE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_:-", min_size=1, max_size=20)

# Every route a space key may call, with {id} and {job} filled with B's memory and job.
ROUTES = [
    ("GET", "/api/v1/memories"), ("GET", "/api/v1/memories?q={marker}"), ("GET", "/api/v1/memories?kind=chunk"),
    ("GET", "/api/v1/memories/{id}"), ("PATCH", "/api/v1/memories/{id}"), ("DELETE", "/api/v1/memories/{id}"),
    ("GET", "/api/v1/jobs/{job}"), ("GET", "/api/v1/pulse"), ("GET", "/api/v1/insight"),
    ("GET", "/api/v1/export?format=jsonl"), ("GET", "/api/v1/export?format=markdown"), ("GET", "/api/v1/tasks"),
    ("GET", "/api/v1/skills"), ("GET", "/api/v1/usage"),
]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=SPACE, b=SPACE, routes=st.lists(st.sampled_from(ROUTES), min_size=3, max_size=8), data=st.data())
async def test_a_key_never_sees_another_space(api, a, b, routes, data):
    if a == b:
        return
    marker = f"zebra{abs(hash((a, b))) % 10**8}"
    key_a, key_b = api.key(a), api.key(b)
    _, mine, _ = await api.call("POST", "/api/v1/memories", key_a, json={"content": "I keep bees on my roof"})
    _, theirs, _ = await api.call("POST", "/api/v1/memories", key_b, json={"content": f"the {marker} secret of {b}"})
    _, job, _ = await api.call("POST", "/api/v1/memories", key_b,
                               json={"messages": [{"role": "user", "content": f"my {marker} turn"}]})
    for method, path in routes:
        url = path.format(id=theirs["id"], job=job["job_id"], marker=marker)
        kw = {"json": {"pinned": True}} if method == "PATCH" else {}
        status, body, _ = await api.call(method, url, key_a, **kw)
        text = body if isinstance(body, str) else json.dumps(body)
        assert marker not in text, (method, url, status)
        if "{id}" in path or "{job}" in path:
            assert status == 404, (method, url, status)
        else:  # (a 404 may name the id A itself sent; nothing else may)
            assert status == 200 and theirs["id"] not in text, (method, url, status, body)
    # B's memory is untouched by whatever A tried.
    _, still, _ = await api.call("GET", f"/api/v1/memories/{theirs['id']}", key_b)
    assert still["status"] == "active" and still["pinned"] is False and mine["id"] != theirs["id"]
