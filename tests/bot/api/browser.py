"""The dashboard tests' browser: Debian's /usr/bin/chromium driven by playwright (never a browser
download), a page that records console errors, the checks a person would make by eye (nothing
wider than the screen, no text under 11 px, labels that do not overlap, every label in the chosen
language), and a space with data to look at."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory.store.rows import add_sources

# Debian's package; MEMGATE_CHROMIUM names another build of the same browser (never a download).
CHROMIUM = Path(os.environ.get("MEMGATE_CHROMIUM") or "/usr/bin/chromium")
INSTALL = "apt-get install -y chromium fonts-wqy-zenhei"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
MIN_FONT_PX = 11
SCREENSHOTS_ENV = "MEMGATE_SCREENSHOTS"


def skip_reason(chromium: Path | None = None) -> str | None:
    """Why the browser tests cannot run here, in one line that says how to fix it (None: they can)."""
    chromium = chromium or CHROMIUM
    if not chromium.exists():
        return f"Chromium is missing ({chromium}): install it with `{INSTALL}`"
    try:
        from playwright.async_api import async_playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing: install the test extra with `pip install '.[test]'`"
    return None


def browser_or_skip() -> None:
    """Skip with the reason locally; fail in CI (CI=true), so a missing install step cannot pass unnoticed."""
    reason = skip_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the dashboard browser tests: {reason}")
        pytest.skip(reason)


@asynccontextmanager
async def chromium() -> AsyncIterator:
    """Debian's Chromium, headless, for one test and closed after it (skipped, or failed in CI,
    where it is missing)."""
    browser_or_skip()
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield browser
        finally:
            await browser.close()


def screenshot_folder(tmp_path: Path) -> Path:
    """$MEMGATE_SCREENSHOTS (docs/screenshots for the committed set) or the test's tmp folder."""
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path / "screens")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Page:
    """A browser page that records every console error and page error it sees."""

    def __init__(self, page, base: str, shots: Path) -> None:
        self.page, self.base, self.shots, self.errors = page, base, shots, []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    async def open(self) -> None:
        """The login form, or a failure that names the page's errors (a module that did not load)."""
        await self.page.goto(self.base + "/")
        try:
            await self.page.locator("#login-key").wait_for(timeout=15_000)
        except Exception:
            pytest.fail(f"the dashboard did not start: {self.errors}")

    async def login(self, key: str, label: str = "API key", button: str = "Log in") -> None:
        await self.open()
        await self.page.get_by_label(label).fill(key)
        await self.page.get_by_role("button", name=button).click()
        await self.page.wait_for_selector("nav a[aria-current=page]")
        await self.settled()

    async def go(self, name: str) -> None:
        await self.page.click(f"#nav-{name}")
        await self.page.wait_for_selector(f"#nav-{name}[aria-current=page]")
        await self.settled()

    async def settled(self) -> None:
        """Every card has its data (no loading line, nothing busy)."""
        await self.page.wait_for_function("() => !document.querySelector('#main [aria-busy], #main .loading')")

    async def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        return path

    async def layout_problems(self, language: str) -> list[str]:
        """What a reader would see wrong: see LAYOUT_CHECK."""
        return await self.page.evaluate(LAYOUT_CHECK, {"minPx": MIN_FONT_PX, "lang": language})


# Run in the page. Text is every non-blank text node that the browser renders (a Range over it has
# a box); its size is the computed font size, times the SVG's scale on screen for chart text.
LAYOUT_CHECK = r"""({minPx, lang}) => {
  const problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) problems.push(`page is ${root.scrollWidth}px wide in a ${root.clientWidth}px window`);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  const chrome = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    if (!text) continue;
    const el = n.parentElement;
    if (el.closest('title, script, style, noscript, option')) continue;
    range.selectNodeContents(n);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
    if (!rects.length || getComputedStyle(el).visibility === 'hidden') continue;
    let px = parseFloat(getComputedStyle(el).fontSize);
    if (el instanceof SVGElement) { const m = el.getScreenCTM(); px *= Math.hypot(m.a, m.b); }
    if (px < minPx - 0.01) problems.push(`${px.toFixed(1)}px text: "${text.slice(0, 40)}" in <${el.tagName.toLowerCase()} class="${el.getAttribute('class') || ''}">`);
    // The dashboard's own words (not the person's data): headings, labels, buttons, legends, badges, table heads.
    if (el.closest('h1, h2, h3, label, button, summary, th, dt, .legend, .badge, .hint, .empty, .count, nav, .tick, .loading')
        && !el.closest('code, .mtext, .tag, .chip, .nlabel, .md, .userdata')) chrome.push(text);
  }
  // Insight's labels: no two overlap.
  const labels = [...document.querySelectorAll('.graph .nlabel')].map((e) => [e.textContent, e.getBoundingClientRect()]);
  for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
    const [a, ra] = labels[i], [b, rb] = labels[j];
    if (ra.left < rb.right - 0.5 && rb.left < ra.right - 0.5 && ra.top < rb.bottom - 0.5 && rb.top < ra.bottom - 0.5) {
      problems.push(`labels overlap: "${a}" and "${b}"`);
    }
  }
  // Scrolling tables: a table wider than its box must be inside a box that scrolls.
  for (const t of document.querySelectorAll('table')) {
    const box = t.parentElement;
    if (t.getBoundingClientRect().width > box.getBoundingClientRect().width + 1 && getComputedStyle(box).overflowX !== 'auto') {
      problems.push(`a table is cut off (${t.getBoundingClientRect().width}px in ${box.getBoundingClientRect().width}px)`);
    }
  }
  if (document.querySelector('input[type=date]')) problems.push('a browser date picker (mm/dd/yyyy follows the browser, not the page)');
  const all = document.body.innerText;
  if (lang === 'zh') {
    // Every word of the dashboard's own in Chinese: no English word but names that stay as they are.
    const allowed = /^(LLM|API|token|p95|memgate|Telegram|Cookie|mg_…|v\d+|[A-Z]{2,})$/;
    for (const text of chrome) {
      const words = text.match(/[A-Za-z_][A-Za-z_]+/g) || [];
      const foreign = words.filter((w) => !allowed.test(w));
      if (foreign.length) problems.push(`untranslated: "${text.slice(0, 60)}"`);
    }
    if (/\b(AM|PM)\b/.test(all)) problems.push('an English time (AM/PM) in the Chinese page');
  }
  if (/\b\d{1,2}\/\d{1,2}\/\d{4}\b/.test(all) && lang === 'zh') problems.push('a US date (m/d/yyyy) in the Chinese page');
  if (/\b[a-z]+_[a-z_]+\b/.test(chrome.join(' '))) problems.push(`an id shown as a label: ${chrome.join(' ').match(/\b[a-z]+_[a-z_]+\b/)[0]}`);
  return problems;
}"""


async def seed(api) -> dict:
    """A space worth looking at: facts in English and Chinese with categories and tags, a captured
    turn with a fact distilled from it, a task, a skill with two versions, LLM usage; an admin's
    pairing request, a person, a public note. Returns the keys and ids the tests use."""
    from memory.llm import charged_to
    from memory.store.rows import utc_naive
    from memory.tasks.skill_files import SkillDoc, render_skill_md
    from memory.tasks.skill_library import SkillLibrary
    from tests.bot.api.test_memories import wait_done

    key = api.key("u_alice")
    texts = [("Ana lives in Lisbon", ["family"], "people"), ("Ana visited Lisbon in March with Bruno", ["travel"], "experiences"),
             ("Bruno works at Acme in Porto", ["work"], "people"), ("To Ada's surprise, Ana moved to Porto on Monday", [], "people"),
             ("我和张伟在北京见面，一起吃了宫保鸡丁", ["travel"], "experiences"), ("张伟在清华大学读书，住在海淀区", ["朋友"], "people"),
             ("Prefers green tea over coffee", ["food"], "preferences"), ("Plans a trip to Kyoto with Ana in autumn", ["travel"], "plans"),
             ("Runs every morning before work", ["health"], "routines"), ("Allergic to peanuts", ["health"], "constraints"),
             ("Works with Bruno and Ada on the Acme launch", ["work"], "people")]
    ids = []
    for text, tags, category in texts:
        status, m, _ = await api.call("POST", "/api/v1/memories", key, json={"content": text, "tags": tags})
        assert status == 201, m
        ids.append(m["id"])
        await api.app.store.awrite(lambda c, i=m["id"], cat=category: c.execute(
            "UPDATE memories SET category = ? WHERE id = ?", [cat, i]))
    turn = {"messages": [{"role": "user", "content": "my cat Miso turned three today"}], "session_id": "s1"}
    status, job, _ = await api.call("POST", "/api/v1/memories", key, json=turn)
    chunk = (await wait_done(api, key, job["job_id"]))["memory_ids"][0]
    _, fact, _ = await api.call("POST", "/api/v1/memories", key, json={"content": "Miso the cat is three years old"})
    # Provenance as the ingest records it when it distils a fact from a message.
    await api.app.store.awrite(lambda c: add_sources(c, [fact["id"]], [chunk]))

    now = utc_naive(datetime.now(UTC))
    await api.app.store.awrite(lambda c: c.execute(
        "INSERT INTO tasks (id, space_id, session_id, status, title, summary, chunk_count, started_at, last_at) "
        "VALUES ('t_1', 'u_alice', 's1', 'completed', 'Plan the Kyoto trip', 'Booked flights and a ryokan for October.', 6, ?, ?)",
        [now - timedelta(hours=3), now - timedelta(hours=1)]))
    doc = SkillDoc("book-a-ryokan", "How to book a ryokan in Kyoto", steps=("Pick dates", "Compare prices", "Book"))
    doc2 = SkillDoc("book-a-ryokan", "How to book a ryokan in Kyoto", steps=("Pick dates", "Compare prices on two sites", "Book early"))
    lib = SkillLibrary(api.app.store, api.app.engine.embedder, api.app.settings.data_path, clock=api.app.clock)
    vec = api.app.engine.embedder.embed_passages([doc.description])[0:1]
    await api.app.store.awrite(lambda c: lib._insert_skill(c, "sk_1", "u_alice", doc2, vec, now, [
        (1, render_skill_md(doc), "first version", "t_1", now - timedelta(hours=1)),
        (2, render_skill_md(doc2), "compare two sites; book early", "t_1", now)]))

    with charged_to("u_alice"):  # usage is per space: calls made for this key's space
        for purpose, prompt, completion in (("reply", 12000, 800), ("ingest", 5400, 600), ("task_summary", 900, 120),
                                            ("skill_write", 700, 300), ("reconcile", 400, 40)):
            api.app.extras["usage"].add(purpose, "openai/gpt-4o-mini", True, prompt, completion)
        api.app.extras["usage"].on_recall(0.02, 120)
        api.app.extras["usage"].on_recall(0.02, 40)
    return {"key": key, "bruno": ids[2], "miso": fact["id"], "ids": ids}
