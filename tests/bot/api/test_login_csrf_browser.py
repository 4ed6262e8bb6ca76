"""Login CSRF in a real headless Chromium (issue 22, B7): a page on another origin tries to log the
visitor's browser into the attacker's key, so that what the victim then types into the dashboard
lands in the attacker's space. The attacker's page is served from `evil.example` (mapped to
127.0.0.1 inside the browser only) and tries every way a page can post across origins: a
text/plain form (a top-level navigation, which carries and sets SameSite=Strict cookies), a
no-cors fetch and a CORS fetch with credentials. Afterwards the browser must not be logged in,
while the dashboard's own login still works in the same browser."""

from __future__ import annotations

import json

from aiohttp import web

from bot.api.sessions import COOKIE
from tests.bot.api.browser import ARGS, CHROMIUM, browser_or_skip

EVIL_HOST = "evil.example"


def attacker_page(api_url: str, key: str) -> str:
    """The attacker's page: an auto-submitted text/plain form whose one field spells the JSON login."""
    name, value = json.dumps({"key": key, "pad": ""})[:-2], '"}'
    return f"""<!doctype html><html><body>
<form id="f" method="POST" action="{api_url}/api/v1/session" enctype="text/plain">
  <input type="hidden" name='{name}' value='{value}'>
</form>
<script>
async function tryFetches() {{
  const body = JSON.stringify({{key: {json.dumps(key)}}});
  const out = [];
  try {{ await fetch('{api_url}/api/v1/session', {{method: 'POST', mode: 'no-cors', credentials: 'include',
        headers: {{'Content-Type': 'application/json'}}, body}}); out.push('no-cors sent'); }}
  catch (e) {{ out.push('no-cors failed'); }}
  try {{ const r = await fetch('{api_url}/api/v1/session', {{method: 'POST', mode: 'cors', credentials: 'include',
        headers: {{'Content-Type': 'application/json'}}, body}}); out.push('cors ' + r.status); }}
  catch (e) {{ out.push('cors blocked'); }}
  try {{ await fetch('{api_url}/api/v1/session', {{method: 'POST', mode: 'no-cors', credentials: 'include',
        headers: {{'Content-Type': 'text/plain'}}, body}}); out.push('text no-cors sent'); }}
  catch (e) {{ out.push('text no-cors failed'); }}
  return out;
}}
</script></body></html>"""


async def test_a_page_on_another_origin_cannot_log_the_browser_in(api):
    browser_or_skip()
    from playwright.async_api import async_playwright

    api_url = api.app.extras["api"].url
    attacker_key = api.key("u_mallory")
    victim_key = api.key("u_alice")
    evil = web.Application()
    evil.router.add_get("/", lambda r: web.Response(text=attacker_page(api_url, attacker_key), content_type="text/html"))
    runner = web.AppRunner(evil)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    evil_url = f"http://{EVIL_HOST}:{runner.addresses[0][1]}/"
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                               args=[*ARGS, f"--host-resolver-rules=MAP {EVIL_HOST} 127.0.0.1"])
            try:
                ctx = await browser.new_context()
                page = await ctx.new_page()
                await page.goto(evil_url)
                assert await page.evaluate("location.hostname") == EVIL_HOST
                tried = await page.evaluate("tryFetches()")
                assert "cors 201" not in tried, tried
                # The form: a top-level cross-site POST; the browser follows it to whatever the API answers.
                async with page.expect_navigation():
                    await page.evaluate("document.getElementById('f').submit()")
                answer = await page.evaluate("document.body.innerText")
                assert "logged_in" not in answer, answer
                assert not [c for c in await ctx.cookies() if c["name"] == COOKIE]

                # The victim opens the dashboard: not logged in (as the attacker or anyone).
                await page.goto(api_url + "/")
                who = await page.evaluate("fetch('/api/v1/session').then(r => r.json())")
                assert who == {"logged_in": False}, who

                # The dashboard's own login works in this very browser (the check above can see a login).
                await page.get_by_label("API key").fill(victim_key)
                await page.get_by_role("button", name="Log in").click()
                await page.wait_for_selector("nav a[aria-current=page]")
                who = await page.evaluate("fetch('/api/v1/session').then(r => r.json())")
                assert who["logged_in"] and who["space_id"] == "u_alice"
            finally:
                await browser.close()
    finally:
        await runner.cleanup()
