"""SKILL.md: render and parse the file, name it, and keep it under `<data>/skills/<space>/<name>/`.

The format:

    ---
    name: kebab-case-name
    description: "one sentence, JSON-quoted when it needs quoting"
    ---

    # kebab-case-name

    ## Steps            (## 步骤 in Chinese)
    1. ...
    ## Pitfalls         (## 注意事项)
    - ...
    ## Key commands     (## 关键命令)   - `one-line command`, or a fenced block per longer one
    ## Prerequisites    (## 前提条件)
    - ...

Items that span lines continue on lines indented by three spaces. The database holds every
version; the file is the latest one, for people and for tools that read skill folders.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memory.private_files import write_private
from memory.text import has_cjk

SECTIONS = ("steps", "pitfalls", "commands", "prerequisites")
HEADINGS: dict[str, dict[str, str]] = {
    "en": {"steps": "Steps", "pitfalls": "Pitfalls", "commands": "Key commands", "prerequisites": "Prerequisites"},
    "zh": {"steps": "步骤", "pitfalls": "注意事项", "commands": "关键命令", "prerequisites": "前提条件"},
}
_HEADING_TO_SECTION = {h.casefold(): s for lang in HEADINGS.values() for s, h in lang.items()}
NAME_MAX = 64


@dataclass(frozen=True, slots=True)
class SkillDoc:
    """The content of one SKILL.md version."""

    name: str
    description: str
    steps: tuple[str, ...] = ()
    pitfalls: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    prerequisites: tuple[str, ...] = ()

    @property
    def language(self) -> str:
        return "zh" if has_cjk(self.description + "".join(self.steps)) else "en"


def kebab_name(text: str, fallback: str = "skill") -> str:
    """A kebab-case ASCII name: lowercase letters and digits joined by single hyphens, <= 64 chars."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    name = "-".join(words)[:NAME_MAX].strip("-")
    return name or fallback


def clean_item(text: str) -> str:
    """An item as SKILL.md can hold it: lines right-trimmed, blank lines dropped, ends trimmed."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(ln for ln in lines if ln.strip()).strip()


def clean_command(text: str) -> str:
    """A command as SKILL.md can hold it: verbatim except for trailing spaces and outer blank lines
    (and, for a one-line command, leading spaces)."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines[0].strip() if len(lines) == 1 else "\n".join(lines)


def clean_doc(doc: SkillDoc) -> SkillDoc:
    """Normalise every field so that parse(render(doc)) == doc."""
    def items(xs: Sequence[str]) -> tuple[str, ...]:
        return tuple(x for x in (clean_item(i) for i in xs) if x)

    return SkillDoc(
        name=kebab_name(doc.name),
        description=" ".join(doc.description.split()),
        steps=items(doc.steps),
        pitfalls=items(doc.pitfalls),
        commands=tuple(c for c in (clean_command(x) for x in doc.commands) if c.strip()),
        prerequisites=items(doc.prerequisites),
    )


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or `base-2`, `base-3`, ... : the first not in `taken`."""
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def skill_text(doc: SkillDoc) -> str:
    """What recall shows for a skill: its description and numbered steps."""
    return "\n".join([doc.description, *(f"{i}. {s}" for i, s in enumerate(doc.steps, 1))])


def index_text(doc: SkillDoc) -> str:
    """What a skill is found by (vector and keywords): its name in words and its description."""
    return f"{doc.name.replace('-', ' ')}\n{doc.description}"


def _yaml_value(text: str) -> str:
    """Plain when YAML reads it back unchanged, else a JSON string (valid YAML double-quoted)."""
    reserved = re.fullmatch(r"(?i)y|n|yes|no|true|false|on|off|null|~", text)
    if not reserved and re.fullmatch(r"[^\W\d_][\w ,.()'/+-]*", text) and not text.endswith(" "):
        return text
    return json.dumps(text, ensure_ascii=False)


def _item(prefix: str, text: str) -> str:
    first, *rest = text.split("\n")
    return "\n".join([f"{prefix}{first}", *(f"   {ln}" for ln in rest)])


def _command(command: str) -> str:
    """A one-line command as an inline-code item, a longer one as a fenced block; the backtick runs
    around it are longer than any inside it, so it comes back verbatim."""
    longest = max((len(m) for m in re.findall(r"`+", command)), default=0)
    if "\n" not in command:
        ticks = "`" * (longest + 1)
        pad = " " if command.startswith("`") or command.endswith("`") else ""
        return f"- {ticks}{pad}{command}{pad}{ticks}"
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{command}\n{ticks}"


def render_skill_md(doc: SkillDoc, language: str | None = None) -> str:
    """The SKILL.md text of a skill (headings in `language`, guessed from the content if None)."""
    heads = HEADINGS.get(language or doc.language, HEADINGS["en"])
    out = ["---", f"name: {_yaml_value(doc.name)}", f"description: {_yaml_value(doc.description)}", "---", "",
           f"# {doc.name}", ""]
    for section in SECTIONS:
        items = getattr(doc, section)
        out.append(f"## {heads[section]}")
        if section == "steps":
            out += [_item(f"{i}. ", s) for i, s in enumerate(items, 1)]
        elif section == "commands":
            out += [_command(c) for c in items]
        else:
            out += [_item("- ", s) for s in items]
        out.append("")
    return "\n".join(out)


_STEP = re.compile(r"^\d+[.)]\s+")
_FENCE = re.compile(r"^(`{3,})")
_INLINE = re.compile(r"^- (`+)(.+)\1$")


def _parse_frontmatter(lines: list[str]) -> tuple[dict[str, str], int]:
    meta: dict[str, str] = {}
    if not lines or lines[0].strip() != "---":
        return meta, 0
    for i in range(1, len(lines)):
        line = lines[i]
        if line.strip() == "---":
            return meta, i + 1
        key, sep, value = line.partition(":")
        if sep:
            value = value.strip()
            if value.startswith('"'):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    value = value.strip('"')
            meta[key.strip()] = value
    return meta, len(lines)


def parse_skill_md(text: str) -> SkillDoc:
    """Read a SKILL.md back into a SkillDoc (unknown sections are ignored)."""
    lines = text.replace("\r\n", "\n").split("\n")
    meta, i = _parse_frontmatter(lines)
    found: dict[str, list[str]] = {s: [] for s in SECTIONS}
    section: str | None = None
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("## "):
            section = _HEADING_TO_SECTION.get(line[3:].strip().casefold())
            continue
        if section is None or not line.strip():
            continue
        items = found[section]
        if section == "commands":
            inline = _INLINE.match(line)
            if inline:
                code = inline.group(2)
                items.append(code[1:-1] if len(code) > 1 and code[0] == code[-1] == " " else code)
                continue
            m = _FENCE.match(line)
            if not m:
                continue
            body: list[str] = []
            while i < len(lines) and lines[i].rstrip() != m.group(1):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence
            items.append("\n".join(body))
        elif line.startswith("   ") and items:
            items[-1] += "\n" + line[3:]
        elif section == "steps" and _STEP.match(line):
            items.append(_STEP.sub("", line, count=1))
        elif line.startswith("- "):
            items.append(line[2:])
    return SkillDoc(
        name=meta.get("name", ""),
        description=meta.get("description", ""),
        **{s: tuple(found[s]) for s in SECTIONS},
    )


def safe_component(text: str) -> str:
    """A path component that cannot climb or nest: anything outside [A-Za-z0-9._-] becomes '_'."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip(".")
    return cleaned or "_"


def skill_path(data_dir: Path, space_id: str, name: str) -> Path:
    """Where a skill's SKILL.md lives: <data>/skills/<space>/<name>/SKILL.md."""
    return Path(data_dir) / "skills" / safe_component(space_id) / safe_component(name) / "SKILL.md"


def write_skill_file(data_dir: Path, space_id: str, name: str, content: str) -> Path:
    """Write SKILL.md atomically (a temp file renamed over the old one)."""
    path = skill_path(data_dir, space_id, name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return write_private(path, content)  # 0600: a skill holds the steps of someone's own tasks
