"""The pure rules of tasks and skills (DESIGN section 6): turns, boundaries, skips, eligibility.

No I/O and no LLM here. Every rule is a named check in a table, so a decision can say which
rule made it ("skipped: too_few_chunks") and the tests can walk each row.

Boundary of a turn against the open task, first match wins:
    no open task                                  -> new  (first_task)
    session changed                               -> new  (session_change)
    turn.start - task.last_at > gap (2 h)         -> new  (idle_gap)
    task has no user message yet                  -> same (task_has_no_user_message), no LLM
    turn has no user message                      -> same (turn_has_no_user_message), no LLM
    the turn's user lines are all trivial         -> same (turn_is_trivial), no LLM
    otherwise                                     -> ask the LLM; NEW below 0.65 gets a second look;
                                                     an LLM failure, or an ingest call that left
                                                     the verdict out, means SAME
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from memory.text import has_cjk

Role = Literal["user", "assistant", "tool"]


# --- turns -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """One stored chunk as the task rules see it."""

    id: str
    role: str
    text: str
    created_at: datetime
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """Consecutive chunks of one exchange (a user message and what answered it)."""

    chunks: tuple[ChunkInfo, ...]

    @property
    def started_at(self) -> datetime:
        return self.chunks[0].created_at

    @property
    def ended_at(self) -> datetime:
        return self.chunks[-1].created_at

    @property
    def session_id(self) -> str | None:
        return self.chunks[0].session_id

    @property
    def has_user(self) -> bool:
        return any(c.role == "user" for c in self.chunks)

    @property
    def user_text(self) -> str:
        return "\n".join(c.text for c in self.chunks if c.role == "user")


def group_turns(chunks: Sequence[ChunkInfo]) -> list[Turn]:
    """Split time-ordered chunks into turns.

    Chunks sharing a turn id form one turn. Without a turn id, a user message opens a new turn
    once the current one holds anything but user messages. A session change always opens one.
    """
    turns: list[list[ChunkInfo]] = []
    for c in chunks:
        cur = turns[-1] if turns else None
        if cur is None or c.session_id != cur[-1].session_id:
            turns.append([c])
        elif c.turn_id is not None or cur[-1].turn_id is not None:
            if c.turn_id == cur[-1].turn_id:
                cur.append(c)
            else:
                turns.append([c])
        elif c.role == "user" and any(x.role != "user" for x in cur):
            turns.append([c])
        else:
            cur.append(c)
    return [Turn(tuple(t)) for t in turns]


# --- boundaries --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpenTask:
    """What the boundary rules need to know about the open task."""

    session_id: str | None
    last_at: datetime
    has_user: bool


Action = Literal["new", "same", "ask", "second_look"]


@dataclass(frozen=True, slots=True)
class Step:
    """A boundary decision: what to do with a turn, and the rule that said so."""

    action: Action
    rule: str


@dataclass(frozen=True, slots=True)
class BoundaryRule:
    name: str
    action: Action
    applies: Callable[[OpenTask, Turn, timedelta], bool]


BOUNDARY_RULES: tuple[BoundaryRule, ...] = (
    BoundaryRule("session_change", "new", lambda t, turn, gap: turn.session_id != t.session_id),
    BoundaryRule("idle_gap", "new", lambda t, turn, gap: turn.started_at - t.last_at > gap),
    BoundaryRule("task_has_no_user_message", "same", lambda t, turn, gap: not t.has_user),
    BoundaryRule("turn_has_no_user_message", "same", lambda t, turn, gap: not turn.has_user),
    # "ok thanks" or "just testing" never starts a task; asking the LLM about it is waste.
    BoundaryRule("turn_is_trivial", "same", lambda t, turn, gap: _trivial_turn(turn)),
)


def _trivial_turn(turn: Turn) -> bool:
    lines = [ln for ln in turn.user_text.splitlines() if ln.strip()]
    return bool(lines) and all(is_trivial_line(ln) for ln in lines)


def boundary_step(task: OpenTask | None, turn: Turn, gap: timedelta = timedelta(hours=2)) -> Step:
    """The rule-based part of the boundary decision; Step('ask', 'llm') when only an LLM can tell."""
    if task is None:
        return Step("new", "first_task")
    for rule in BOUNDARY_RULES:
        if rule.applies(task, turn, gap):
            return Step(rule.action, rule.name)
    return Step("ask", "llm")


@dataclass(frozen=True, slots=True)
class Verdict:
    """An LLM's SAME/NEW answer."""

    new: bool
    confidence: float


# The ingest call was asked for the verdict and left it out (small models answer the facts and
# skip the rest) or gave one that is neither SAME nor NEW: the rules decide SAME, as for a failed
# judge, rather than a second call for the turn (issue 33: 1,950 judge calls for 1,980 turns).
# A wrong merge costs less than a split task; the idle gap and a session change still split.
MISSING_VERDICT = Verdict(new=False, confidence=0.0)


def resolve_verdict(first: Verdict | None, second: Verdict | None = None, *, threshold: float = 0.65) -> Step:
    """Turn LLM verdicts into a step. None = the call failed (which means SAME).

    SAME -> same; NEW with confidence >= threshold -> new; a less sure NEW -> second_look until
    the second verdict is given, which then decides alone.
    """
    if first is None:
        return Step("same", "llm_failed")
    if not first.new:
        return Step("same", "llm_same")
    if first.confidence >= threshold:
        return Step("new", "llm_new")
    if second is None:
        return Step("second_look", "llm_new_unsure")
    return Step("new", "second_look_new") if second.new else Step("same", "second_look_same")


# --- skip rules --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SkipThresholds:
    """DESIGN section 6 defaults."""

    min_chunks: int = 4
    min_exchanges: int = 2
    min_chars: int = 200
    min_chars_cjk: int = 80
    trivial_ratio: float = 0.7
    tool_ratio: float = 0.7
    tool_max_user: int = 1


@dataclass(frozen=True, slots=True)
class TaskDigest:
    """The (role, text) sequence of a task's chunks, in order."""

    messages: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, chunks: Sequence[ChunkInfo]) -> TaskDigest:
        return cls(tuple((c.role, c.text) for c in chunks))

    def count(self, role: str) -> int:
        return sum(1 for r, _ in self.messages if r == role)


def count_exchanges(messages: Sequence[tuple[str, str]]) -> int:
    """User messages answered by an assistant message before the next user message."""
    n, waiting = 0, False
    for role, _ in messages:
        if role == "user":
            waiting = True
        elif role == "assistant" and waiting:
            n, waiting = n + 1, False
    return n


def _chars(d: TaskDigest) -> int:
    return sum(len(t.strip()) for _, t in d.messages)


def _too_short(d: TaskDigest, th: SkipThresholds) -> bool:
    limit = th.min_chars_cjk if has_cjk(" ".join(t for _, t in d.messages)) else th.min_chars
    return _chars(d) < limit


def _mostly_trivial(d: TaskDigest, th: SkipThresholds) -> bool:
    lines = [ln for r, t in d.messages if r != "tool" for ln in t.splitlines() if ln.strip()]
    if not lines:
        return True
    return sum(is_trivial_line(ln) for ln in lines) / len(lines) > th.trivial_ratio


def _tool_heavy(d: TaskDigest, th: SkipThresholds) -> bool:
    if not d.messages:
        return False
    return d.count("tool") / len(d.messages) >= th.tool_ratio and d.count("user") <= th.tool_max_user


@dataclass(frozen=True, slots=True)
class SkipRule:
    name: str
    applies: Callable[[TaskDigest, SkipThresholds], bool]


# Any one rule skips the task; the order only picks the reason reported, most telling first
# (a tool-heavy task with one user message also has < 2 exchanges, and "tool_heavy" says more).
SKIP_RULES: tuple[SkipRule, ...] = (
    SkipRule("too_few_chunks", lambda d, th: len(d.messages) < th.min_chunks),
    SkipRule("no_user_message", lambda d, th: d.count("user") == 0),
    SkipRule("tool_heavy", _tool_heavy),
    SkipRule("too_few_exchanges", lambda d, th: count_exchanges(d.messages) < th.min_exchanges),
    SkipRule("too_short", _too_short),
    SkipRule("mostly_trivial", _mostly_trivial),
)


def skip_reason(digest: TaskDigest, thresholds: SkipThresholds = SkipThresholds()) -> str | None:
    """The name of the first skip rule the task meets, or None when it deserves a summary."""
    for rule in SKIP_RULES:
        if rule.applies(digest, thresholds):
            return rule.name
    return None


# --- trivial lines -----------------------------------------------------------------------------
# A line is trivial when every word in it is a greeting, an acknowledgement, a test or a filler
# word. Function words are in the list on purpose: "is there anything else I can help with"
# carries no content, and any line with content has at least one word outside it.
TRIVIAL_WORDS = frozenset(
    """hi hello hey heya hiya yo there ok okay k kk thanks thank thx ty tysm you test testing tested
    tests bye goodbye cya good morning afternoon evening night gn yes yeah yep yup ya no nope nah
    sure cool great nice fine alright lol haha hah hehe hmm um uh oh ah wow right done please pls
    sorry np welcome got it how can i help today what do for anything else with is are am be a an
    the me my to all just again see later day have has am doing well going here so much very and
    let know if need glad happy i'm you're it's that's im youre how's whats what's ping pong
    working works work bot assistant still back too as always any other more questions question
    feel free ask awesome perfect amazing wonderful understood noted copy roger lot lots bunch""".split()
)
TRIVIAL_CJK = tuple(sorted(set(
    """你好 您好 嗨 哈喽 哈罗 早上好 早安 午安 下午好 晚上好 晚安 再见 拜拜 回见 好的 好滴 好嘞 好 嗯嗯 嗯 哦哦 哦 噢
    喔 谢谢 多谢 感谢 谢了 不客气 不用谢 没事 没关系 测试一下 测试 试试 在吗 在不在 在 收到 了解 明白 知道了 行 可以 对
    是的 是 哈哈哈 哈哈 呵呵 嘿嘿 有什么 可以 帮到 帮 帮助 需要 随时 还有 其他 问题 请问 一下 很高兴 高兴 为 服务
    我 你 您 的 吗 呢 吧 啊 呀 了 么 能 什么 都 又 也 就 呗 啦 嘛""".split()
), key=lambda p: (-len(p), p)))
_TRIVIAL_MAX_CHARS = 80
_LATIN_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")


def is_trivial_line(line: str) -> bool:
    """True for a short line made only of greetings, acknowledgements, tests and filler words."""
    text = unicodedata.normalize("NFKC", line).strip().lower()
    if len(text) > _TRIVIAL_MAX_CHARS:
        return False
    for run in _CJK_RUN.findall(text):
        rest = run
        for phrase in TRIVIAL_CJK:
            rest = rest.replace(phrase, "")
        if rest:
            return False
    latin = _CJK_RUN.sub(" ", text)
    return all(w.replace("’", "'") in TRIVIAL_WORDS for w in _LATIN_WORD.findall(latin))


# --- language ----------------------------------------------------------------------------------
Language = Literal["zh", "en"]


def user_language(texts: Sequence[str]) -> Language:
    """'zh' when the user's messages hold at least as many CJK characters as Latin words."""
    joined = "\n".join(texts)
    cjk = sum(len(r) for r in _CJK_RUN.findall(joined))
    words = len(_LATIN_WORD.findall(_CJK_RUN.sub(" ", joined.lower())))
    return "zh" if cjk and cjk >= words else "en"


# --- skill eligibility -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SkillThresholds:
    """DESIGN section 6: rule filter before any skill LLM call."""

    min_chunks: int = 6
    min_summary_chars: int = 100
    roles: frozenset[str] = field(default=frozenset({"user", "assistant"}))


def skill_reject_reason(chunk_count: int, summary: str | None, roles: Sequence[str],
                        thresholds: SkillThresholds = SkillThresholds()) -> str | None:
    """Why a completed task cannot teach a skill (the rule's name), or None when it may."""
    if chunk_count < thresholds.min_chunks:
        return "too_few_chunks"
    if len((summary or "").strip()) < thresholds.min_summary_chars:
        return "summary_too_short"
    if not thresholds.roles <= set(roles):
        return "missing_role"
    return None
