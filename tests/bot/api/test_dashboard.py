"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium driven by playwright)
against the real gateway App with its API on a free port over a real DuckDB file.

It logs in with a key, sees a memory, edits and pins it, checks that the Pulse chart and the
Insight graph render with data, visits every page with no console error, and approves a pairing
request with an admin key. A screenshot of each page lands in $MEMGATE_SCREENSHOTS (or the
test's tmp folder); the folder is printed. Without Chromium the test skips locally, saying so and
how to install it, and fails in CI (CI=true), so a missing install step cannot pass unnoticed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.api.sessions import COOKIE
from memory.store.rows import add_sources
from tests.bot.api.browser import PHONE, Page, browser_or_skip, chromium, screenshot_folder
from tests.bot.api.test_memories import wait_done
from tests.bot.api.test_routes import _dm


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = screenshot_folder(tmp_path)
    print(f"\ndashboard screenshots: {folder}")
    return folder


async def _seed(api) -> tuple[str, str, str]:
    """Four facts (entities for Insight), and a fact whose source is a captured turn's message."""
    key = api.key("u_alice")
    texts = [("Ana lives in Lisbon", ["family"]), ("Ana visited Lisbon in March", ["travel"]),
             ("Bruno works at Acme in Porto", ["work"]), ("我和张伟在北京见面", ["travel"])]
    ids = []
    for text, tags in texts:
        status, m, _ = await api.call("POST", "/api/v1/memories", key, json={"content": text, "tags": tags})
        assert status == 201
        ids.append(m["id"])
    turn = {"messages": [{"role": "user", "content": "my cat Miso turned three today"}], "session_id": "s1"}
    status, job, _ = await api.call("POST", "/api/v1/memories", key, json=turn)
    chunk = (await wait_done(api, key, job["job_id"]))["memory_ids"][0]
    _, fact, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "Miso the cat is three years old"})
    # Provenance as the ingest records it when it distils a fact from a message.
    await api.app.store.awrite(lambda c: add_sources(c, [fact["id"]], [chunk]))
    return key, ids[2], fact["id"]


async def test_dashboard_in_chromium(api, shots):
    browser_or_skip()   # before playwright's import: a missing install is a skip that says how to fix it
    from playwright.async_api import expect

    expect.set_options(timeout=30_000)  # as long as wait_for's default: a loaded machine renders slowly

    key, bruno, miso = await _seed(api)
    base = api.app.extras["api"].url
    saved: list[Path] = []
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=PHONE, locale="en-US")
        p = Page(await ctx.new_page(), base, shots)
        await p.login(key)

        # Login gave an HttpOnly, SameSite=Strict cookie, and no key is kept by the page.
        cookie = next(c for c in await ctx.cookies() if c["name"] == COOKIE)
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert key not in await p.page.evaluate("JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")

        # Memories: the memory is listed; edit its text, then pin it.
        item = p.page.locator(f"li.memory[data-id='{bruno}']")
        await item.wait_for()
        assert "Bruno works at Acme in Porto" in await item.inner_text()
        await item.get_by_role("button", name="Edit").click()
        await item.get_by_label("Text").fill("Bruno works at Acme in Braga")
        await item.get_by_role("button", name="Save").click()
        await item.locator(".mtext", has_text="Braga").wait_for()
        await item.get_by_role("button", name="Pin").click()
        await item.locator(".badge.pinned").wait_for()
        status, m, _ = await api.call("GET", f"/api/v1/memories/{bruno}", key)
        assert m["text"] == "Bruno works at Acme in Braga" and m["pinned"] is True and m["version"] == 3
        # Provenance: the fact's source message.
        fact = p.page.locator(f"li.memory[data-id='{miso}']")
        await fact.get_by_role("button", name="Sources (1)").click()
        await fact.locator("ol.sources blockquote", has_text="my cat Miso turned three today").wait_for()
        # Forget asks first: Cancel keeps the memory, Confirm forgets it.
        await fact.get_by_role("button", name="Forget").click()
        await p.page.locator("#confirm-no").click()
        assert (await api.call("GET", f"/api/v1/memories/{miso}", key))[0] == 200
        await fact.get_by_role("button", name="Forget").click()
        await p.page.locator("#confirm-yes").click()
        await fact.wait_for(state="detached")
        status, gone, _ = await api.call("GET", f"/api/v1/memories/{miso}", key)
        assert status == 404 or gone["status"] != "active"
        # Search shows production recall scores.
        await p.page.get_by_label("Search", exact=True).fill("Lisbon")
        await p.page.click("#mem-go")
        # Every hit the production recall returns carries its score (which hits is recall's business).
        # The list shown before the search also has a count line: wait for the scored hits
        # themselves (expect retries), not for any count (that raced under load).
        hits = await api.call("GET", "/api/v1/memories?q=Lisbon", key)
        await expect(p.page.locator("li.memory .score")).to_have_count(len(hits[1]["memories"]))
        shown = await p.page.locator("#mem-results").inner_text()
        assert "null" not in shown and "undefined" not in shown, shown  # absent fields print nothing
        saved.append(await p.shot("memories"))

        # Pulse: a stacked bar chart with one coloured segment per category; a bar lists its day.
        await p.go("pulse")
        await p.page.locator("#pulse-chart svg g.bar rect.seg").first.wait_for()
        assert await p.page.locator("#pulse-chart svg g.bar rect.seg").count() >= 1
        await p.page.locator("#pulse-chart svg g.bar:has(rect.seg)").last.click()
        await p.page.locator("#pulse-list li.memory").first.wait_for()
        listed = (await api.call("GET", "/api/v1/memories", key))[1]["total"]  # all made today
        assert listed >= 4
        await expect(p.page.locator("#pulse-list li.memory")).to_have_count(listed)
        saved.append(await p.shot("pulse"))

        # Insight: the entity graph with nodes and edges; an entity lists its memories.
        await p.go("insight")
        await p.page.locator("#insight-graph svg g.node").first.wait_for()
        assert await p.page.locator("#insight-graph svg g.node").count() >= 4
        assert await p.page.locator("#insight-graph svg line.edge").count() >= 1
        await p.page.locator("#insight-graph svg g.node[data-id='name:ana']").click()
        await expect(p.page.locator("#insight-list li.memory")).to_have_count(2)
        assert "null" not in await p.page.locator("#insight-list").inner_text()
        saved.append(await p.shot("insight"))

        await p.go("skills")
        await p.page.locator("#tasks-h").wait_for()
        saved.append(await p.shot("skills"))
        # SKILL.md rendering and the version diff, run in the browser: markup in a skill stays text.
        md = await p.page.evaluate("""async () => {
            const m = await import('/static/markdown.js');
            const el = m.renderMarkdown('# Backup\\n\\n- run `pg_dump`\\n- **check** <img src=x onerror=alert(1)>\\n');
            const d = m.diffLines('a\\nb\\nc', 'a\\nB\\nc').map((x) => x.op + x.line);
            return {html: el.innerHTML, imgs: el.querySelectorAll('img').length, diff: d};
        }""")
        assert md["imgs"] == 0 and "&lt;img" in md["html"] and "<code>pg_dump</code>" in md["html"]
        assert "<h3>Backup</h3>" in md["html"] and "<strong>check</strong>" in md["html"]
        assert md["diff"] == [" a", "-b", "+B", " c"]
        from memory.llm import charged_to

        with charged_to("u_alice"):  # usage is per space: a call made for this key's space
            api.app.extras["usage"].add("reply", "openai/gpt-4o-mini", True, 100, 20)
            api.app.extras["usage"].on_recall(0.02, 120)  # two turns' memory blocks
            api.app.extras["usage"].on_recall(0.02, 40)
        await p.go("usage")
        await p.page.locator("#usage-box svg rect.seg").first.wait_for()
        # The second series: memory tokens injected per turn (mean 80 of 120 and 40), with its table.
        await p.page.locator("#usage-injected svg rect.seg").first.wait_for()
        cells = await p.page.locator("#usage-injected tbody tr").first.locator("td").all_inner_texts()
        assert cells[1:] == ["2", "80", "116", "120", "160"]
        saved.append(await p.shot("usage"))

        # Chinese follows the picker.
        await p.page.select_option("#lang", "zh")
        await p.page.locator("#nav-usage", has_text="用量").wait_for()
        await p.settled()
        saved.append(await p.shot("usage-zh"))

        # Logout ends the session: the API no longer takes the cookie.
        await p.page.click("#logout")
        await p.page.get_by_label("API 密钥").wait_for()
        assert p.errors == [], p.errors

        # Admin: approve a pairing request with an admin key.
        await api.app.access.check(_dm("111"))
        pending = await api.app.pairing.pending()
        code = pending[0].code
        actx = await browser.new_context(viewport={"width": 1200, "height": 900}, locale="en-US")
        a = Page(await actx.new_page(), base, shots)
        await a.login(api.key(scope="admin"))
        row = a.page.locator(f"tr[data-code='{code}']")
        await row.wait_for()
        saved.append(await a.shot("admin-pending"))
        await row.get_by_role("button", name="Approve").click()
        await a.page.get_by_text("No one is waiting.").wait_for()
        await a.page.locator("#people td", has_text="telegram:111").wait_for()
        saved.append(await a.shot("admin-approved"))
        assert [u.key for u in await api.app.access.users()] == ["telegram:111"]
        assert a.errors == [], a.errors
    for path in saved:
        assert path.stat().st_size > 1000
        print(f"  {path}")
