"""Every dashboard page at 390 px (a phone) and 1280 px, in English and in Chinese, in a real
Chromium, checked the way a reader would see it (tests/bot/api/browser.py LAYOUT_CHECK): nothing
wider than the screen (tables scroll in their box), no visible text under 11 px (chart text at
its size on screen), Insight's labels never overlapping, every label of the dashboard in the
chosen language, dates and numbers as that language writes them. Each page is screenshotted as
`{page}-{width}-{lang}.png` into $MEMGATE_SCREENSHOTS (the committed set: docs/screenshots).

Also: a loading line (never an empty card) while data comes, an error that clears when the next
try works, adding a memory, and the admin's keys (shown once) and shared notes.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.bot.api.browser import DESKTOP, PHONE, Page, chromium, screenshot_folder, seed, skip_reason
from tests.bot.api.test_routes import _dm

SPACE_PAGES = ("memories", "pulse", "insight", "skills", "usage")


@pytest.fixture
def api_store_url() -> str:
    """Layout does not depend on the backend: these run on the DuckDB file only."""
    return ""


def test_a_skip_says_chromium_is_missing_and_how_to_install_it(tmp_path):
    reason = skip_reason(tmp_path / "no-chromium")
    assert reason == (f"Chromium is missing ({tmp_path / 'no-chromium'}): install it with "
                      "`apt-get install -y chromium fonts-wqy-zenhei`")
    assert "\n" not in reason


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
async def test_every_page_reads_well(api, tmp_path, viewport, lang):
    data = await seed(api)
    await api.app.access.check(_dm("111"))          # a pairing request for the admin page
    shots, width = screenshot_folder(tmp_path), viewport["width"]
    problems: dict[str, list[str]] = {}
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=viewport, locale="en-US", timezone_id="Asia/Shanghai")
        await ctx.add_init_script(f"localStorage.setItem('memgate.lang', '{lang}')")
        p = Page(await ctx.new_page(), api.app.extras["api"].url, shots)
        await p.open()
        problems["login"] = await p.layout_problems(lang)
        await p.shot(f"login-{width}-{lang}")
        await p.page.locator("#login-key").fill(data["key"])
        await p.page.locator("#login-submit").click()
        await p.page.wait_for_selector("nav a[aria-current=page]")
        await p.settled()
        for name in SPACE_PAGES:
            if name != "memories":
                await p.go(name)
            if name == "insight":
                await p.page.locator("#insight-graph svg g.node").first.wait_for()
            if name == "skills":   # a skill opened: its SKILL.md and the diff of its versions
                await p.page.locator("#skills-h ~ ul button").first.click()
                await p.page.locator("#skill-diff pre").wait_for()
            problems[name] = await p.layout_problems(lang)
            await p.shot(f"{name}-{width}-{lang}")
        await p.page.click("#logout")
        await p.page.locator("#login-key").wait_for()

        await p.page.locator("#login-key").fill(api.key(scope="admin"))
        await p.page.locator("#login-submit").click()
        await p.page.wait_for_selector("#nav-admin[aria-current=page]")
        await p.settled()
        problems["admin"] = await p.layout_problems(lang)
        await p.shot(f"admin-{width}-{lang}")
        assert p.errors == [], p.errors
    bad = {page: found for page, found in problems.items() if found}
    assert not bad, bad


async def test_the_chinese_pages_write_dates_numbers_and_names_in_chinese(api, tmp_path):
    data = await seed(api)
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=PHONE, locale="en-US", timezone_id="Asia/Shanghai")
        await ctx.add_init_script("localStorage.setItem('memgate.lang', 'zh')")
        p = Page(await ctx.new_page(), api.app.extras["api"].url, screenshot_folder(tmp_path))
        await p.login(data["key"], label="API 密钥", button="登录")
        when = await p.page.locator("li.memory .when").first.inner_text()
        assert re.fullmatch(r"\d{4}年\d{1,2}月\d{1,2}日 \d{2}:\d{2}", when), when
        badges = await p.page.locator("li.memory .badge[data-category]").all_inner_texts()
        assert badges and not any("_" in b or re.search(r"[a-z]", b) for b in badges), badges
        # The date filter takes and shows dates as Chinese writes them.
        await p.page.locator("#mem-since").fill("2020/1/5")
        await p.page.locator("#mem-since").press("Tab")
        assert await p.page.locator("#mem-since").input_value() == "2020年1月5日"
        await p.page.locator("#mem-since").fill("13/13/2020")
        await p.page.locator("#mem-since").press("Tab")
        assert await p.page.locator("#mem-since").get_attribute("aria-invalid") == "true"
        assert "不是有效的日期" in await p.page.locator("#mem-since-hint").inner_text()
        await p.go("pulse")
        legend = await p.page.locator("#pulse-chart .legend li").all_inner_texts()
        assert {x.strip() for x in legend} >= {"身边的人", "经历", "偏好", "计划", "日常习惯", "限制与禁忌"}, legend
        await p.go("usage")
        legend = await p.page.locator("#usage-box .legend li").all_inner_texts()
        assert {x.strip() for x in legend} >= {"回复", "记忆提取", "任务总结", "技能撰写", "记忆合并"}, legend
        cells = await p.page.locator("#usage-table tbody tr", has_text="回复").locator("td").all_inner_texts()
        assert re.fullmatch(r"\d{4}年\d{1,2}月\d{1,2}日", cells[0]) and cells[1] == "回复" and cells[4] == "12,000", cells
        await p.go("insight")
        chips = await p.page.locator("#insight-graph .chip").all_inner_texts()
        names = {c.splitlines()[0].strip() for c in chips}
        assert {"张伟", "北京", "Ana", "Lisbon", "Ada", "Bruno"} <= names, names
        assert not names & {"宫保鸡", "To", "Ada's", "Monday", "March", "Prefers", "Runs"}, names
        person = await p.page.locator("#insight-graph .chip[data-id='person:张伟']").get_attribute("aria-label")
        assert "人物" in person, person
        assert p.errors == [], p.errors


async def test_dates_read_back_in_both_languages(api, tmp_path):
    """Whatever day the field shows, in either language, reads back as the same day (1900-2100),
    and what is no date (31 February, 13/13) is refused."""
    async with chromium() as browser:
        page = await (await browser.new_context(locale="en-US")).new_page()
        await page.goto(api.app.extras["api"].url + "/")
        result = await page.evaluate("""async () => {
            const i18n = await import('/static/i18n.js');
            const f = await import('/static/format.js');
            const bad = [];
            for (const lang of ['en', 'zh']) {
                i18n.setLang(lang);
                for (let t = Date.UTC(1900, 0, 1); t <= Date.UTC(2100, 11, 31); t += 86400000) {
                    const iso = new Date(t).toISOString().slice(0, 10);
                    for (const shown of [f.showDate(iso), iso, iso.replaceAll('-', '/')]) {
                        if (f.parseDate(shown, lang) !== iso) bad.push([lang, shown, f.parseDate(shown, lang)]);
                    }
                }
            }
            const refused = ['2026-02-31', '2026年2月30日', '13/13/2026', 'Feb 30, 2026', 'soon', '2026-13-01']
                .filter((x) => f.parseDate(x, 'en') !== null);
            return {bad: bad.slice(0, 5), count: bad.length, refused,
                    us: f.parseDate('12/2/2026', 'en'), eu: f.parseDate('2/12/2026', 'zh'), empty: f.parseDate('  ', 'en')};
        }""")
    assert result["count"] == 0, result["bad"]
    assert result["refused"] == [] and result["us"] == result["eu"] == "2026-12-02" and result["empty"] == ""


async def test_graph_labels_never_overlap_on_random_graphs(api, tmp_path):
    """Insight's graph for 200 random graphs (5-60 entities, names in both scripts) at phone and
    desktop widths: no two drawn labels overlap, none covers its own circle or leaves the picture,
    and the most mentioned entity always gets its label."""
    async with chromium() as browser:
        page = await (await browser.new_context(locale="en-US")).new_page()
        await page.goto(api.app.extras["api"].url + "/")
        result = await page.evaluate("""async () => {
            const c = await import('/static/charts.js');
            let seed = 42; const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
            const words = ['Ana', 'Bruno', 'Lisbon', 'Bank of America', '张伟', '清华大学', '北京', 'Kyoto', 'Jean-Luc O’Brien', 'X'];
            const bad = []; let drawn = 0, total = 0, topMissing = 0;
            for (let g = 0; g < 200; g++) {
                const n = 5 + Math.floor(rnd() * 56), width = g % 2 ? 358 : 720, height = Math.round(Math.max(320, Math.min(560, width * 0.85)));
                const nodes = Array.from({length: n}, (_, i) => ({id: `e${i}`, label: words[i % words.length] + (i >= words.length ? i : ''),
                    kind: ['person', 'place', 'organisation', 'name'][i % 4], count: 1 + Math.floor(rnd() * 9)}));
                const edges = [];
                for (let i = 0; i < n; i++) { const a = Math.floor(rnd() * n), b = Math.floor(rnd() * n); if (a !== b) edges.push({source: `e${a}`, target: `e${b}`, weight: 1 + Math.floor(rnd() * 4)}); }
                const svg = c.entityGraph(nodes, edges, {title: 'g', width, height});
                document.body.append(svg);
                const box = svg.getBoundingClientRect();
                const labels = [...svg.querySelectorAll('.nlabel')].map((e) => [e.getBoundingClientRect(),
                    svg.querySelector(`g[data-id="${e.dataset.for}"] circle`).getBoundingClientRect()]);
                drawn += labels.length; total += n;
                const most = [...nodes].sort((a, b) => b.count - a.count || (a.label < b.label ? -1 : 1))[0].id;
                if (!svg.querySelector(`.nlabel[data-for="${most}"]`)) topMissing++;
                const hit = (a, b, tol) => a.left < b.right - tol && b.left < a.right - tol && a.top < b.bottom - tol && b.top < a.bottom - tol;
                labels.forEach(([a, own], i) => {
                    if (a.left < box.left - 1 || a.right > box.right + 1 || a.top < box.top - 1 || a.bottom > box.bottom + 1) bad.push(['outside', g]);
                    labels.forEach(([b], j) => { if (j > i && hit(a, b, 0.5)) bad.push(['overlap', g]); });
                    // never over its own circle (the square inside it)
                    const s = own.width * 0.15;
                    if (hit(a, {left: own.left + s, right: own.right - s, top: own.top + s, bottom: own.bottom - s}, 0.5)) bad.push(['covers its circle', g]);
                });
                svg.remove();
            }
            return {bad: bad.slice(0, 5), count: bad.length, drawn, total, topMissing};
        }""")
    assert result["count"] == 0, result["bad"]
    assert result["topMissing"] == 0
    print(f"\nlabels drawn: {result['drawn']} of {result['total']} entities")
    assert result["drawn"] > result["total"] * 0.5


async def test_cards_show_loading_then_data_and_errors_clear(api, tmp_path):
    """Pulse's request held: its cards say they are loading (no empty card); the request failing:
    the card says so with a retry that, once the server answers, clears the error. A failed login's
    error is gone after the next login works."""
    data = await seed(api)
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=PHONE, locale="en-US")
        p = Page(await ctx.new_page(), api.app.extras["api"].url, screenshot_folder(tmp_path))
        # A wrong key: the error under the field. Then the right key: no error anywhere.
        await p.open()
        await p.page.get_by_label("API key").fill("mg_wrong")
        await p.page.get_by_role("button", name="Log in").click()
        await p.page.locator("#login-error", has_text="not accepted").wait_for()
        await p.page.get_by_label("API key").fill(data["key"])
        await p.page.get_by_role("button", name="Log in").click()
        await p.page.wait_for_selector("nav a[aria-current=page]")
        await p.settled()
        assert await p.page.locator("#login-error").count() == 0
        assert await p.page.locator("#status").inner_text() == ""
        assert "not accepted" not in await p.page.locator("body").inner_text()

        held, release, fail = asyncio.Event(), asyncio.Event(), {"next": True}

        async def hold(route):
            held.set()
            await release.wait()
            if fail["next"]:
                fail["next"] = False
                await route.fulfill(status=503, content_type="application/json",
                                    body='{"error": {"code": "unavailable", "message": "store busy"}}')
            else:
                await route.continue_()

        await p.page.route(re.compile(r".*/api/v1/pulse\?.*"), hold)
        await p.page.click("#nav-pulse")
        await held.wait()
        for card in ("#pulse-chart", "#pulse-tags"):
            await p.page.locator(f"{card} .loading").wait_for()
            assert await p.page.locator(card).get_attribute("aria-busy") == "true"
            assert "Loading" in await p.page.locator(card).inner_text()
        release.set()
        await p.page.locator("#pulse-chart .load-error").wait_for()
        assert "store busy" in await p.page.locator("#pulse-chart").inner_text()
        await p.page.locator("#pulse-chart button.retry").click()
        await p.page.locator("#pulse-chart svg g.bar").first.wait_for()
        await p.settled()
        assert await p.page.locator("#main .load-error").count() == 0
        # The browser logs the two failed requests (the wrong key's 401, the held 503) and nothing else.
        assert all("status of 401" in e or "status of 503" in e for e in p.errors) and len(p.errors) == 2, p.errors


async def test_add_a_memory_and_a_read_key_sees_no_write_controls(api, tmp_path):
    data = await seed(api)
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=PHONE, locale="en-US")
        p = Page(await ctx.new_page(), api.app.extras["api"].url, screenshot_folder(tmp_path))
        await p.login(data["key"])
        await p.page.locator("#mem-add summary").click()
        await p.page.get_by_label("What should be remembered").fill("Ana's birthday is on 3 May")
        await p.page.get_by_label("Tags (comma separated)").first.fill("family，birthday")
        await p.page.locator("#add-pin").check()
        await p.page.locator("#add-save").click()
        item = p.page.locator("li.memory", has_text="Ana's birthday is on 3 May")
        await item.wait_for()
        await item.locator(".badge.pinned").wait_for()
        _, listed, _ = await api.call("GET", "/api/v1/memories", data["key"], params={"q": "birthday"})
        m = next(x for x in listed["memories"] if x["text"] == "Ana's birthday is on 3 May")
        assert m["pinned"] and {"family", "birthday"} <= set(m["tags"])
        assert p.errors == [], p.errors

        r = Page(await (await browser.new_context(viewport=PHONE, locale="en-US")).new_page(), p.base, p.shots)
        await r.login(api.key("u_alice", scope="read"))
        assert await r.page.locator("#mem-add").count() == 0
        assert await r.page.locator("li.memory .edit-btn, li.memory .forget-btn, #bulk-forget").count() == 0
        await r.page.get_by_text("This key may read only").wait_for()
        assert r.errors == [], r.errors


async def test_admin_creates_a_key_shown_once_revokes_it_and_adds_a_shared_note(api, tmp_path):
    await api.app.access.check(_dm("111"))
    code = (await api.app.pairing.pending())[0].code
    await api.app.pairing.approve(code, None)      # a person to make a key for
    space = (await api.app.access.users())[0].space_id
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=PHONE, locale="en-US")
        a = Page(await ctx.new_page(), api.app.extras["api"].url, screenshot_folder(tmp_path))
        await a.login(api.key(scope="admin"))
        # A space key needs its person.
        await a.page.locator("#key-create").click()
        await a.page.get_by_text("Choose whose memories the key reaches.").wait_for()
        await a.page.locator("#key-space").select_option(space)
        await a.page.locator("#key-name").fill("Ana's phone")
        await a.page.locator("#key-life").select_option("30")
        await a.page.locator("#key-create").click()
        shown = a.page.locator("#new-key-value")
        await shown.wait_for()
        key = await shown.input_value()
        assert key.startswith("mg_")
        assert (await api.call("GET", "/api/v1/memories", key))[0] == 200
        row = a.page.locator(f"#keys tr[data-prefix='{key[:10]}']")
        await row.wait_for()
        assert "Ana's phone" in await row.inner_text() and key not in await a.page.locator("#keys table").inner_text()
        # Once: after "I have saved it", or on the next visit, the key is nowhere in the page.
        await a.page.locator("#new-key-done").click()
        assert key not in await a.page.content()
        await a.page.reload()
        await a.settled()
        assert key not in await a.page.content()
        # Revoke, confirmed: the key stops working at once.
        await a.page.locator(f"#keys tr[data-prefix='{key[:10]}'] button.revoke").click()
        await a.page.locator("#confirm-yes").click()
        await a.page.locator(f"#keys tr[data-prefix='{key[:10]}'] .key-state-revoked").wait_for()
        assert (await api.call("GET", "/api/v1/memories", key))[0] == 401
        # A shared note, added from the admin page, is in the public space.
        await a.page.locator("#public summary").click()
        await a.page.locator("#public-text").fill("The office wifi is guest-net")
        await a.page.locator("#public-add").click()
        await a.page.locator("#public li.memory", has_text="The office wifi is guest-net").wait_for()
        pub = await api.app.engine.list([api.app.access.PUBLIC_SPACE], kinds=("fact",), limit=10)
        assert [m.text for m in pub] == ["The office wifi is guest-net"]
        assert a.errors == [], a.errors


# Issue 30: the ids local servers give their models (llama.cpp a GGUF's path, vLLM a Hugging Face id).
LONG_MODEL_IDS = ("/home/ann/.local/share/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                  "bartowski/Qwen2.5-Coder-32B-Instruct-abliterated-GGUF:Q4_K_M")


@pytest.mark.timeout(300)  # a browser and a seeded space on a shared 2-core machine
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
async def test_the_usage_table_keeps_its_numbers_in_view_with_long_model_ids(api, tmp_path, viewport):
    from memory.llm import charged_to

    data = await seed(api)
    with charged_to("u_alice"):
        for purpose, model in zip(("ingest", "reconcile"), LONG_MODEL_IDS):
            api.app.extras["usage"].add(purpose, model, True, 3000, 700)
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=viewport, locale="en-US")
        p = Page(await ctx.new_page(), api.app.extras["api"].url, screenshot_folder(tmp_path))
        await p.login(data["key"])
        await p.go("usage")
        await p.shot(f"usage-long-models-{viewport['width']}")
        cells = p.page.locator("#usage-table td.model")
        titles = [await cells.nth(i).get_attribute("title") for i in range(await cells.count())]
        assert set(LONG_MODEL_IDS) <= set(titles), titles          # the whole id on hover
        for model in LONG_MODEL_IDS:
            clip = p.page.locator(f"#usage-table td.model[title='{model}'] .clip")
            cut = await clip.evaluate("(e) => e.scrollWidth > e.clientWidth && getComputedStyle(e).textOverflow")
            assert cut == "ellipsis", (model, cut)
        # The table fits its card at 1280 px (no sideways scroll); on a phone the model column is
        # at most as wide as the cut, so the numbers are a short swipe away, not a path's width.
        table, box = await p.page.locator("#usage-table table").evaluate(
            "(t) => [t.getBoundingClientRect().width, t.parentElement.getBoundingClientRect().width]")
        if viewport is DESKTOP:
            assert table <= box + 1, (table, box)
        else:
            widest, cut_at = await cells.evaluate_all(
                "(cs) => [Math.max(...cs.map((c) => c.getBoundingClientRect().width)),"
                " parseFloat(getComputedStyle(cs[0].querySelector('.clip')).maxWidth) + 17]")
            assert widest <= cut_at, (widest, cut_at)
        assert p.errors == [], p.errors


@pytest.mark.timeout(300)  # a browser and a seeded space on a shared 2-core machine
async def test_erase_everything_shows_the_counts_and_a_code_then_erases_and_logs_out(api, tmp_path):
    """The dashboard's button asks as /forget everything does (issue 35): counts, then a code typed back."""
    data = await seed(api)
    other = api.key("u_bob")
    await api.call("POST", "/api/v1/memories", other, json={"content": "Bob keeps bees"})
    async with chromium() as browser:
        ctx = await browser.new_context(viewport=PHONE, locale="en-US")
        p = Page(await ctx.new_page(), api.app.extras["api"].url, screenshot_folder(tmp_path))
        await p.login(data["key"])
        await p.page.locator("#erase-all summary").click()
        await p.page.locator("#erase-start").click()
        plan = await p.page.locator("#erase-plan").text_content()
        assert "facts" in plan and "reminders" in plan and "cannot be undone" in plan
        text = await p.page.locator("#erase-step").text_content()
        code = re.search(r"type the code ([A-Z0-9]{8})", text).group(1)
        _, listed, _ = await api.call("GET", "/api/v1/memories", data["key"])
        assert listed["total"] > 0                       # nothing erased before the code
        await p.page.get_by_label("Confirmation code").fill(code.lower())
        await p.page.locator("#erase-confirm").click()
        await p.page.locator("#login-key").wait_for()    # the key went with the space: logged out
        await p.page.get_by_text("Everything was erased.").wait_for()
        status, _, _ = await api.call("GET", "/api/v1/memories", data["key"])
        assert status == 401
        _, bob, _ = await api.call("GET", "/api/v1/memories", other)
        assert [m["text"] for m in bob["memories"]] == ["Bob keeps bees"]
        # The 409 that carried the code is the one request the browser logs as failed.
        assert all("status of 409" in e for e in p.errors), p.errors
