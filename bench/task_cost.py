"""LLM cost of tasks and skills on a scripted multi-task conversation.

Six episodes (a how-to, chit-chat, greetings, the same how-to for a second database, a better
method for the how-to, a Chinese how-to) go turn by turn through the real pipeline: chunks
stored as ingest would, `TaskProcessor.assign` after each turn, the skill evolver after each
turn (as the scheduler would run it), and `close_idle` at the end. The LLM is the scripted fake
OpenAI server (tests/fakes/llm_server.py) with a rule-based responder, reached through the real
litellm client. Tokens are the fake server's counts (characters / 4 of the request and answer),
so they measure prompt size, not a real tokenizer.

With --folded, each turn goes through capture and the real ingest worker instead of being stored
directly: the ingest call (answered by the same rules) carries the boundary verdict, so the
boundary column stays 0 and the run total shows the ingest calls instead. With --no-verdict too,
the ingest call answers facts and titles but leaves the verdict out, as small models do (issue 33):
the boundary column then shows what deciding without it costs.

Prints LLM calls and tokens per closed task and per skill decision, then the SKILL.md versions
the run produced.

    python bench/task_cost.py [--folded [--no-verdict]]
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from memory import prompts  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from memory.engine import MemoryEngine  # noqa: E402
from memory.ingest.capture import CapturedTurn, TurnMessage  # noqa: E402
from memory.llm import LiteLLM, LLMSettings  # noqa: E402
from memory.store.rows import NewMemory, insert_memories, new_id  # noqa: E402
from memory.tasks.skill_files import kebab_name, parse_skill_md  # noqa: E402
from memory.tasks.skills import SkillEvolver  # noqa: E402
from memory.store.connection import Store  # noqa: E402
from memory.tasks.processor import TaskProcessor  # noqa: E402
from memory.text import STOPWORDS, tokenize, trim  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.clock import FakeClock  # noqa: E402
from tests.fakes.llm_server import FakeLLM  # noqa: E402

SPACE = "u:demo"
DAY1 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Episode:
    label: str
    start: datetime
    session: str
    turns: tuple[tuple[str, str], ...]   # (user, assistant)


EPISODES = (
    Episode("how-to: nightly PostgreSQL backup", DAY1, "tg", (
        ("How do I back up my PostgreSQL database appdb every night on Ubuntu?",
         "Use pg_dump in custom format: `pg_dump -U app -Fc appdb -f /var/backups/appdb.dump`. Then schedule it with cron."),
        ("How do I schedule the backup with cron?",
         "Run `crontab -e` and add `0 2 * * * pg_dump -U app -Fc appdb -f /var/backups/appdb.dump`."),
        ("The cron backup file is empty, but it works by hand. My password is password: Hunter2-db",
         "cron has no PGPASSWORD. Put `localhost:5432:appdb:app:PASSWORD` in `~/.pgpass` and run `chmod 600 ~/.pgpass`."),
        ("That fixed the backup, thanks!", "Great. Check /var/backups/appdb.dump after tonight's run."),
    )),
    Episode("chit-chat: naming a kitten", DAY1 + timedelta(minutes=40), "tg", (
        ("By the way, what is a good name for a grey kitten? We adopted one on Saturday.",
         "Congratulations! Ash, Smokey, Pebble or Earl Grey are nice names for a grey kitten."),
        ("Earl Grey is funny, my daughter loves tea-themed names.",
         "Then Earl Grey fits perfectly, and you could call her Earl for short."),
        ("Haha, we'll vote at dinner tonight.", "Enjoy the family vote, and welcome to the kitten!"),
    )),
    Episode("greetings only", DAY1 + timedelta(hours=4), "tg", (
        ("hi", "Hello! How can I help you today?"),
        ("just testing", "Yes, I'm working!"),
    )),
    Episode("same how-to, second database (nothing new)", DAY1 + timedelta(days=2), "tg", (
        ("I need the same nightly PostgreSQL backup for the reportsdb database.",
         "Same recipe: `crontab -e` and add `0 3 * * * pg_dump -U app -Fc reportsdb -f /var/backups/reportsdb.dump`."),
        ("Does the pgpass file need another line for the reportsdb backup?",
         "Yes: add `localhost:5432:reportsdb:app:PASSWORD` to `~/.pgpass`."),
        ("Done, the reportsdb backup file is there.", "Good, both databases are now backed up nightly."),
    )),
    Episode("better method: verified, rotated, alerting backup", DAY1 + timedelta(days=5), "tg", (
        ("Last night's PostgreSQL backup was corrupt and nobody noticed. How do I make the nightly backup reliable?",
         "Verify each dump right after writing it: `pg_restore --list /var/backups/appdb.dump > /dev/null` "
         "fails on a corrupt file."),
        ("And how do I stop the backup folder from filling the disk?",
         "Keep 14 days: `find /var/backups -name '*.dump' -mtime +14 -delete`."),
        ("Can cron tell me when the backup fails?",
         "Wrap it in a script with `set -euo pipefail` and set `MAILTO=ops@example.com` in the crontab; "
         "cron mails the output of a failing job."),
        ("Perfect, the verified backup with rotation runs now.", "Nice: the backups are now verified, rotated and alerting."),
    )),
    Episode("how-to in Chinese: nginx in Docker", DAY1 + timedelta(days=5, hours=5), "wx", (
        ("怎么用 Docker 部署 nginx 并把网站文件挂载进去？",
         "运行 `docker run -d --name web -p 8080:80 -v /srv/site:/usr/share/nginx/html:ro nginx`。"),
        ("容器启动了但是 8080 端口访问不了怎么办？", "先用 `docker ps` 确认端口映射，再用 `sudo ufw allow 8080/tcp` 打开防火墙。"),
        ("防火墙打开以后可以访问了，谢谢！", "不客气，修改网站文件后刷新页面即可生效。"),
    )),
)


# --- the rule-based model ------------------------------------------------------------------------
_TICKS = re.compile(r"`([^`]+)`")
_IMPROVES = {"verify", "verified", "corrupt", "rotation", "rotate", "fails", "failing", "alert", "alerting", "faster",
             "mail", "mails", "retry"}
_VERBS = {"back": "backup", "deploy": "deploy", "set": "setup", "install": "install", "configure": "config",
          "make": "", "fix": "fix", "run": "run", "部署": "deploy", "备份": "backup", "安装": "install"}
_GENERIC = {"database", "server", "file", "files", "site", "website", "ubuntu", "linux"}
_TOOLS = {"pg_dump": "PostgreSQL client tools (pg_dump, pg_restore)", "crontab": "cron", "docker": "Docker",
          "ufw": "ufw firewall", "find": "", "chmod": "", "set": ""}


def words(text: str) -> set[str]:
    """Content words: tokens that are not stopwords, Latin ones of 3+ letters, CJK ones of 2+."""
    return {t for t in tokenize(text) if t not in STOPWORDS and (len(t) >= 3 if t.isascii() else len(t) >= 2)}


def section(text: str, head: str, stop: str | None = None) -> str:
    part = text.split(head, 1)[1] if head in text else ""
    return part.split(stop, 1)[0] if stop and stop in part else part


def judge(system: str, user: str) -> dict:
    new = "\n".join(ln[6:] for ln in section(user, "NEW MESSAGE\n").splitlines() if ln.startswith("user: "))
    context = section(user, "CURRENT TASK\n", "NEW MESSAGE")
    shared = words(new) & words(context)
    short = len(words(new)) < 6 or "thank" in new.lower() or "谢谢" in new
    if "Look again" in system:
        return {"verdict": "SAME" if shared or short else "NEW", "confidence": 0.8}
    if shared:
        return {"verdict": "SAME", "confidence": 0.85}
    return {"verdict": "NEW", "confidence": 0.5 if short else 0.9}


def summarise(user: str) -> dict:
    msgs = re.findall(r"^\[\d+\] (user|assistant|tool): (.*?)(?=^\[\d+\] |\Z)", user, re.S | re.M)
    said = [t.strip() for r, t in msgs if r == "user"]
    answers = [t.strip() for r, t in msgs if r == "assistant"]
    first = said[0] if said else ""
    title = re.sub(r"^(how (do|can) i|by the way,?|怎么用?|i need)\s*", "", first, flags=re.I).rstrip("?？.")
    steps = [re.split(r"(?<=[.。])\s", a)[0] if "`" in a.split(".")[0] else a for a in answers if "`" in a]
    details = sorted({m for a in answers for m in re.findall(r"(?:~|/)[\w./-]+|\w+@[\w.]+", a)})
    return {"title": trim(title[:1].upper() + title[1:], 80), "goal": first, "steps": steps,
            "result": answers[-1] if answers else "", "details": details[:6]}


def decide(user: str) -> dict:
    task = section(user, "TASK\n", "\n\nSKILLS")
    skills = [ln for ln in section(user, "SKILLS\n").splitlines() if re.match(r"\d+\. ", ln)]
    best, best_n = None, 1
    for i, line in enumerate(skills, 1):
        n = len(words(task.splitlines()[0] + " " + task) & words(line.replace("-", " ")))
        if n > best_n:
            best, best_n = i, n
    if best is not None:
        new_markers = (words(task) & _IMPROVES) - words(skills[best - 1])
        return {"match": best, "upgrade": bool(new_markers), "reusable": False,
                "reason": f"adds {', '.join(sorted(new_markers))}" if new_markers else "nothing new"}
    reusable = bool(_commands(task))
    return {"match": None, "upgrade": False, "reusable": reusable,
            "reason": "a procedure with commands" if reusable else "chit-chat, nothing to repeat"}


def skill_name(task: str) -> str:
    """Subject words of the title (instance names such as 'appdb' dropped), then its verb as a noun."""
    title = re.sub(r"(?i)every (night|day)", lambda m: "nightly" if m.group(1).lower() == "night" else "daily",
                   task.splitlines()[0])
    instances = {w for c in _commands(task) for w in re.findall(r"[a-z]+db\b", c)}
    verb = next((v for k, v in _VERBS.items() if re.search(rf"(?i)(^|\s){k}(\s|$)", title)), "")
    kept = [w for w in re.findall(r"[A-Za-z][\w-]*", title)
            if w.lower() not in STOPWORDS | _GENERIC | instances | set(_VERBS) | {"my", "up"}]
    return kebab_name(" ".join(kept[:3] + [verb]), "")


def _commands(task: str) -> list[str]:
    """Backticked snippets that look like commands (a word, a space, arguments)."""
    out = []
    for line in task.splitlines():
        out += [c for c in _TICKS.findall(line) if " " in c.strip() and c not in out]
    return out


def _steps(task: str) -> list[str]:
    return [re.sub(r"^\d+\. ", "", ln) for ln in task.splitlines() if re.match(r"^\d+\. ", ln)]


def create(user: str) -> dict:
    tools = [t for c in _commands(user) for t in c.split()[:2] if t in _TOOLS]
    return {"name": skill_name(user), "description": user.splitlines()[0],
            "steps": _steps(user), "commands": _commands(user),
            "pitfalls": [s.strip() for s in re.split(r"(?<=[.。])\s*|\d\. ", user) if re.search(r"\bno\b|empty|不了", s)][:3],
            "prerequisites": [p for p in dict.fromkeys(_TOOLS[t] for t in tools) if p]}


def upgrade(user: str) -> dict:
    old = parse_skill_md(section(user, "CURRENT SKILL.md\n", "\n\nNEW TASK"))
    task = section(user, "NEW TASK\n")
    new_steps = [s for s in _steps(task) if s not in old.steps]
    new_cmds = [c for c in _commands(task) if c not in old.commands]
    if not (new_steps or new_cmds) or not words(task) & _IMPROVES:
        return {"improved": False}
    return {"improved": True, "changelog": "Added: " + "; ".join(trim(re.split(r"[:：;]", s)[0], 40) for s in new_steps),
            "description": old.description + " (verified, rotated, alerting)", "steps": [*old.steps, *new_steps],
            "pitfalls": [*old.pitfalls, "A dump nobody restores may be corrupt: verify it every night"],
            "commands": [*old.commands, *new_cmds], "prerequisites": [*old.prerequisites, "a working MAILTO address"]}


_ASKED = re.compile(r"^\[\d+\] user: (.*)$", re.M)


def ingest_answer(turn_prompt: str, verdict: bool = True) -> dict:
    """The ingest call (--folded): titles and facts as tests/fakes/brain.py gives them, and the
    task verdict from `judge` on what the prompt shows of the current task (unless `verdict` is
    False: a model that leaves it out)."""
    answer = brain.turn_answer(turn_prompt)
    if not verdict:
        answer.pop("task", None)
    elif "CURRENT TASK" in turn_prompt:
        gist = turn_prompt.split("CURRENT TASK", 1)[1].split("\n", 1)[1]
        said = "\n".join(f"user: {m}" for m in _ASKED.findall(turn_prompt))
        answer["task"] = judge(prompts.TASK_BOUNDARY_SYSTEM, f"CURRENT TASK\n{gist}\n\nNEW MESSAGE\n{said}")
    return answer


def responder(body: dict, verdict: bool = True) -> str:
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if system.startswith(prompts.TURN_SYSTEM[:40]):
        turn = functools.partial(ingest_answer, verdict=verdict)
        answer = brain.batch_answer(user, turn=turn) if prompts.TURN_BATCH_NOTE in system else turn(user)
    elif system.startswith(prompts.RECONCILE_SYSTEM[:40]):
        answer = brain.reconcile_answer(user)
    elif "split a chat into tasks" in system or "Look again" in system:
        answer = judge(system, user)
    elif system.startswith("You summarise one finished task"):
        answer = summarise(user)
    elif system.startswith("You keep a library of reusable skills"):
        answer = decide(user)
    elif system.startswith("Write a reusable skill"):
        answer = create(user)
    elif system.startswith("Improve a skill"):
        answer = upgrade(user)
    else:
        answer = {}
    return json.dumps(answer, ensure_ascii=False)


# --- the run -------------------------------------------------------------------------------------
@dataclass
class Cost:
    calls: int = 0
    tokens: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.calls + other.calls, self.tokens + other.tokens)


@dataclass
class TaskRow:
    label: str
    boundary: Cost = field(default_factory=Cost)
    summary: Cost = field(default_factory=Cost)


def snapshot(llm: LiteLLM) -> dict[str, Cost]:
    u = llm.usage
    return {p: Cost(u.calls[p], u.prompt_tokens[p] + u.completion_tokens[p]) for p in u.calls}


def delta(before: dict[str, Cost], after: dict[str, Cost], purpose: str) -> Cost:
    a, b = after.get(purpose, Cost()), before.get(purpose, Cost())
    return Cost(a.calls - b.calls, a.tokens - b.tokens)


def store_turn(store: Store, embedder, user: str, answer: str, at: datetime, session: str) -> None:
    turn = new_id("turn")
    pair = (("user", user), ("assistant", answer))
    rows = [NewMemory(space_id=SPACE, kind="chunk", role=role, text=text, title=trim(text, 60),
                      created_at=at + timedelta(seconds=i * 20), session_id=session, turn_id=turn)
            for i, (role, text) in enumerate(pair)]
    vectors = embedder.embed_passages([r.text for r in rows])
    store.write(lambda c: insert_memories(c, rows, vectors))


async def run(folded: bool = False, verdict: bool = True) -> None:
    clock = FakeClock(DAY1)
    embedder = LocalE5Embedder()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "m.duckdb", embedder.dim) as store:
        async with FakeLLM(responder=functools.partial(responder, verdict=verdict)) as fake:
            llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake.base_url, retries=0, timeout=30))
            proc = TaskProcessor(store, embedder, llm, clock=clock.now)
            engine = MemoryEngine(store, embedder, llm, clock=clock.now)
            engine.worker.on_ingested, engine.worker.task_gap = proc.assign, proc.settings.idle_gap
            evolver = SkillEvolver(store, embedder, llm, Path(tmp), clock=clock.now)
            tasks: dict[str, TaskRow] = {}
            decisions: list[tuple[str, str, Cost, Cost]] = []

            async def evolve() -> None:
                pending = store.read(lambda c: [r[0] for r in c.execute(
                    "SELECT id FROM tasks WHERE status = 'completed' AND NOT skill_checked ORDER BY last_at").fetchall()])
                for task_id in pending:
                    before = snapshot(llm)
                    out = await evolver.evolve_task(task_id)
                    after = snapshot(llm)
                    decisions.append((tasks[task_id].label, f"{out.action} {out.reason}".strip(),
                                      delta(before, after, "skill_decide"), delta(before, after, "skill_write")))

            for ep in EPISODES:
                for i, (user, answer) in enumerate(ep.turns):
                    at = ep.start + timedelta(minutes=3 * i)
                    clock.set(at)
                    open_before = store.read(lambda c: c.execute(
                        "SELECT id FROM tasks WHERE status = 'open' AND closed_at IS NULL").fetchone())
                    before = snapshot(llm)
                    if folded:  # through capture and the ingest worker, whose call gives the verdict
                        await engine.capture(CapturedTurn(
                            space_id=SPACE, session_id=ep.session, turn_id=new_id("turn"), created_at=at,
                            messages=(TurnMessage("user", user), TurnMessage("assistant", answer))))
                        await engine.worker.drain()
                    else:
                        store_turn(store, embedder, user, answer, at, ep.session)
                        await proc.assign(SPACE)
                    after = snapshot(llm)
                    if open_before:
                        tasks[open_before[0]].boundary += delta(before, after, "task_boundary")
                        tasks[open_before[0]].summary += delta(before, after, "task_summary")
                    for (tid,) in store.read(lambda c: c.execute("SELECT id FROM tasks").fetchall()):
                        tasks.setdefault(tid, TaskRow(ep.label))
                    await evolve()
            clock.advance(hours=3)
            before = snapshot(llm)
            await proc.close_idle()
            last = store.read(lambda c: c.execute("SELECT id FROM tasks ORDER BY started_at DESC").fetchone()[0])
            tasks[last].summary += delta(before, snapshot(llm), "task_summary")
            await evolve()
            rows = store.read(lambda c: c.execute(
                "SELECT id, status, skip_reason, chunk_count, title FROM tasks ORDER BY started_at").fetchall())
            report(rows, tasks, decisions, llm)
            await show_skills(evolver)


def report(rows, tasks: dict[str, TaskRow], decisions, llm: LiteLLM) -> None:
    print("Closed tasks (calls / tokens; boundary = judging the turns of the task while it was open)")
    print(f"{'episode':<52}{'chunks':>7}  {'status':<26}{'boundary':>14}{'summary':>14}{'total':>14}")
    total = Cost()
    for tid, status, reason, count, _title in rows:
        t = tasks[tid]
        cost = t.boundary + t.summary
        total += cost
        label = status if status != "skipped" else f"skipped ({reason})"
        print(f"{t.label:<52}{count:>7}  {label:<26}{_c(t.boundary):>14}{_c(t.summary):>14}{_c(cost):>14}")
    kept = [r for r in rows if r[1] == "completed"]
    print(f"{'all tasks':<52}{sum(r[3] for r in rows):>7}  {f'{len(kept)} summarised':<26}{'':>28}{_c(total):>14}")
    print(f"per closed task ({len(rows)}): {total.calls / max(1, len(rows)):.1f} calls, "
          f"{total.tokens / max(1, len(rows)):.0f} tokens; "
          f"per summarised task ({len(kept)}): {total.calls / max(1, len(kept)):.1f} calls, "
          f"{total.tokens / max(1, len(kept)):.0f} tokens (all costs over summarised tasks)")
    summ = sum((tasks[r[0]].summary for r in kept), Cost())
    print(f"summary alone: {summ.calls / max(1, len(kept)):.1f} call, {summ.tokens / max(1, len(kept)):.0f} tokens per task; "
          f"boundary: {sum(tasks[r[0]].boundary.calls for r in rows)} calls for "
          f"{sum(len(e.turns) for e in EPISODES)} turns")
    print()
    print("Skill decisions (calls / tokens)")
    print(f"{'episode':<52}{'outcome':<44}{'decide':>12}{'write':>12}")
    stotal = Cost()
    for label, outcome, dec, wr in decisions:
        stotal += dec + wr
        print(f"{label:<52}{trim(outcome, 42):<44}{_c(dec):>12}{_c(wr):>12}")
    print(f"per skill decision: {stotal.calls / max(1, len(decisions)):.1f} calls, "
          f"{stotal.tokens / max(1, len(decisions)):.0f} tokens")
    u = llm.usage
    n = sum(len(e.turns) for e in EPISODES)
    per_turn = ("ingest", "reconcile", "task_boundary")
    calls = sum(u.calls.get(p, 0) for p in per_turn)
    tokens = sum(u.prompt_tokens.get(p, 0) + u.completion_tokens.get(p, 0) for p in per_turn)
    print(f"per turn ({n} turns; ingest, reconcile and boundary calls): {calls / n:.2f} calls, {tokens / n:.0f} tokens"
          f" ({', '.join(f'{p} {u.calls.get(p, 0)}' for p in per_turn)})")
    print(f"run total: {u.total_calls()} LLM calls, {u.total_tokens()} tokens "
          f"({', '.join(f'{p} {n}' for p, n in sorted(u.calls.items()))})")


def _c(cost: Cost) -> str:
    return f"{cost.calls} / {cost.tokens}"


async def show_skills(evolver: SkillEvolver) -> None:
    for skill in await evolver.search("backup nginx docker postgresql", [SPACE], limit=10):
        for version in await evolver.history(skill.id, [SPACE]):
            print(f"\n===== {skill.name} SKILL.md v{version.version} ({version.changelog}) =====")
            print(version.content.rstrip())


if __name__ == "__main__":
    asyncio.run(run(folded="--folded" in sys.argv[1:], verdict="--no-verdict" not in sys.argv[1:]))
