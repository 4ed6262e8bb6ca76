"""The dashboard's Reminders page (issue 34) in a real Chromium, as a person uses it: set a reminder in
words (English and Chinese), see the exact local time it was understood as, be asked when WHEN is
unclear, cancel one after confirming; a read key sees the list without the controls; the admin sees
them per person. The page reads well on a phone in both languages (tests/bot/api/browser.py)."""

from __future__ import annotations

import pytest

from bot.reminders.store import Address
from tests.bot.api.browser import PHONE, Page, chromium, screenshot_folder, seed

pytestmark = pytest.mark.timeout(300)   # a browser and a seeded space on a shared 2-core machine

# Every text the status line shows (confirmations fade after a few seconds: kept here to read).
RECORD_SAID = """() => { window.said = []; const el = document.getElementById('status');
  new MutationObserver(() => { if (el.textContent) window.said.push(el.textContent); })
    .observe(el, {childList: true, characterData: true, subtree: true}); }"""


@pytest.fixture
def api_store_url() -> str:
    """The page does not depend on the backend (tests/bot/api/test_reminders_api.py covers both)."""
    return ""


async def _context(browser, lang: str):
    ctx = await browser.new_context(viewport=PHONE, locale="en-US", timezone_id="Asia/Shanghai")
    await ctx.add_init_script(f"localStorage.setItem('memgate.lang', '{lang}')")
    return ctx


async def _set(p: Page, when: str, what: str) -> None:
    await p.page.locator("#rem-when").fill(when)
    await p.page.locator("#rem-what").fill(what)
    await p.page.locator("#rem-form button[type=submit]").click()


async def _said(p: Page, part: str) -> str:
    await p.page.wait_for_function("(part) => window.said.some((s) => s.includes(part))", arg=part)
    return next(s for s in await p.page.evaluate("() => window.said") if part in s)


async def test_the_reminders_page_sets_lists_and_cancels_and_the_admin_sees_them(api, tmp_path):
    data = await seed(api)
    await api.app.extras["reminders"].store.note_dm("u_alice", Address("telegram", "100", None, "100"))
    shots = screenshot_folder(tmp_path)
    async with chromium() as browser:
        p = Page(await (await _context(browser, "en")).new_page(), api.app.extras["api"].url, shots)
        await p.login(data["key"])
        await p.go("reminders")
        await p.page.get_by_text("No reminders. Set one below").wait_for()
        await p.page.evaluate(RECORD_SAID)

        await _set(p, "tomorrow 9:00", "call mum")
        said = await _said(p, "call mum")
        assert said.startswith("OK, I'll remind you on ") and "09:00" in said, said
        await p.page.locator("#reminders li", has_text="call mum").wait_for()
        await _set(p, "every monday 8:00", "water the plants")
        await p.page.locator("#reminders li", has_text="water the plants").wait_for()
        # An unclear WHEN is asked back, nothing is set, and the question stays on screen.
        await _set(p, "明天", "交报告")
        asked = await _said(p, "几点")
        assert await p.page.locator("#status.error").count() == 1, asked
        assert await p.page.locator("#reminders li").count() == 2

        _, listed, _ = await api.call("GET", "/api/v1/reminders", data["key"])
        by_what = {r["what"]: r for r in listed["reminders"]}
        assert set(by_what) == {"call mum", "water the plants"} and listed["zone"] == "UTC"
        await p.page.get_by_role("heading", name="Active reminders (UTC)").wait_for()
        for r in listed["reminders"]:   # the exact local time understood, as the API gives it
            row = await p.page.locator("#reminders li", has_text=r["what"]).inner_text()
            assert f"#{r['id']} {r['local']}" in row, row
        assert "(" in await p.page.locator("#reminders li", has_text="water the plants").inner_text()  # repeats
        assert await p.layout_problems("en") == []
        await p.shot("reminders-390-en")

        # Cancel, confirmed: gone from the page and from the space.
        mum = by_what["call mum"]["id"]
        await p.page.locator("#reminders li", has_text="call mum").get_by_role("button", name="Cancel").click()
        await p.page.locator("#confirm-yes").click()
        await _said(p, f"Cancelled #{mum}.")
        await p.page.locator("#reminders li", has_text="call mum").wait_for(state="detached")
        _, listed, _ = await api.call("GET", "/api/v1/reminders", data["key"])
        assert [r["what"] for r in listed["reminders"]] == ["water the plants"]
        # The failed request that carried the question is the one the browser logs.
        assert all("status of 422" in e for e in p.errors) and len(p.errors) == 1, p.errors

        # In Chinese: a Chinese WHEN, the page in Chinese.
        z = Page(await (await _context(browser, "zh")).new_page(), p.base, shots)
        await z.login(data["key"], label="API 密钥", button="登录")
        await z.go("reminders")
        await z.page.evaluate(RECORD_SAID)
        await _set(z, "明天上午9点", "交报告")
        await z.page.locator("#reminders li", has_text="交报告").wait_for()
        assert "09:00" in await _said(z, "交报告")
        await z.page.get_by_role("heading", name="待提醒（UTC）").wait_for()
        assert await z.layout_problems("zh") == []
        await z.shot("reminders-390-zh")
        assert z.errors == [], z.errors

        # A read key sees them, without a way to set or cancel.
        r = Page(await (await _context(browser, "en")).new_page(), p.base, shots)
        await r.login(api.key("u_alice", scope="read"))
        await r.go("reminders")
        await r.page.locator("#reminders li", has_text="water the plants").wait_for()
        assert await r.page.locator("#rem-form").count() == 0
        assert await r.page.locator("#reminders button").count() == 0
        assert r.errors == [], r.errors

        # The admin sees every person's, under their space.
        a = Page(await (await _context(browser, "en")).new_page(), p.base, shots)
        await a.login(api.key(scope="admin"))
        box = a.page.locator("#admin-reminders")
        await box.get_by_text("water the plants").wait_for()
        text = await box.inner_text()
        assert "u_alice" in text and "交报告" in text and "call mum" not in text, text
        assert a.errors == [], a.errors
