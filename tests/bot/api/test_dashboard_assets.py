"""The dashboard's files: shipped as package data (found through importlib.resources, also in a
non-editable build), served at `/` with a Content-Security-Policy that keeps every script, style
and request on this origin, and nothing in them that would fetch from elsewhere."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.api.routes_dashboard import assets

ROOT = Path(__file__).resolve().parents[3]
NEEDED = {"index.html", "app.js", "api.js", "dom.js", "i18n.js", "charts.js", "markdown.js", "style.css",
          "page_memories.js", "page_pulse.js", "page_insight.js", "page_skills.js", "page_usage.js", "page_admin.js"}


def test_assets_are_package_resources():
    files = {f.name for f in (resources.files("bot.api") / "static").iterdir()}
    assert NEEDED <= files and NEEDED <= set(assets())


def test_a_non_editable_build_ships_the_assets(tmp_path):
    """What `pip install .` copies: setuptools' build_py with this pyproject's package data."""
    lib = tmp_path / "lib"
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py", "--build-lib",
                    str(lib)], cwd=ROOT, check=True, capture_output=True)
    assert NEEDED <= {p.name for p in (lib / "bot" / "api" / "static").iterdir()}
    code = (f"import sys; sys.path.insert(0, {str(lib)!r}); import json, bot.api.routes_dashboard as d; "
            "print(json.dumps([d.__file__, sorted(d.assets())]))")
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True)
    where, names = json.loads(out.stdout)
    assert where.startswith(str(lib)) and NEEDED <= set(names)


def test_modules_import_only_shipped_files_and_nothing_remote():
    js = {n: b.decode() for n, b in assets().items() if n.endswith((".js", ".html", ".css"))}
    for name, text in js.items():
        for target in re.findall(r"""from\s+['"]([^'"]+)['"]|src=["']([^"']+)["']|href=["']([^"']+)["']""", text):
            ref = next(t for t in target if t)
            if ref.startswith(("#", "data:")):
                continue
            assert ref.removeprefix("/static/").removeprefix("./") in assets(), (name, ref)
        # The only absolute URL allowed is the SVG namespace (an identifier, never fetched).
        urls = set(re.findall(r"https?://[^\s'\"`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (name, urls)
        assert "innerHTML" not in text and "eval(" not in text, name


async def test_index_and_assets_are_served_with_csp(api):
    status, html, headers = await api.call("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and '<script type="module"' in html
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    for name in NEEDED - {"index.html"}:
        status, body, headers = await api.call("GET", f"/static/{name}")
        assert status == 200 and body == assets()[name].decode(), name
        assert headers["Content-Type"].startswith("text/css" if name.endswith(".css") else "text/javascript")
    for bad in ("../server.py", "..%2Fserver.py", "nope.js", "__init__.py", "%2e%2e%2fkeys.py"):
        status, body, _ = await api.call("GET", f"/static/{bad}")
        assert status == 404 and body["error"]["code"] == "not_found", bad


def test_i18n_has_every_key_in_both_languages():
    text = assets()["i18n.js"].decode()
    head, rest = text.split("  en: {", 1)
    en, zh = (set(re.findall(r"(?:'([\w.]+)'|\b(\w+)):\s*'", block)) for block in rest.split("\n  zh: {", 1))
    assert en == zh and len(en) > 100
    used = set()
    for name, body in assets().items():
        if name.endswith(".js"):
            used |= set(re.findall(r"\bt\('([\w.]+)'", body.decode()))
    keys = {a or b for a, b in en}
    assert used <= keys, used - keys


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40))
def test_only_shipped_names_are_served(name):
    """Whatever the name, the asset lookup answers a shipped file or nothing: no path is ever opened."""
    from aiohttp import web

    from bot.api.errors import ApiError
    from bot.api.routes_dashboard import _serve

    try:
        resp = _serve(name)
    except ApiError as exc:
        assert exc.status == 404 and name not in assets()
    else:
        assert isinstance(resp, web.Response) and name in assets() and resp.body == assets()[name]
