"""A deterministic rule-based "model" for the fake LLM server: it answers memgate's own
prompts (turn analysis, reconciliation, replies) the way a careful model would, so end-to-end
tests and cost benchmarks run the real pipeline with realistic JSON."""

from __future__ import annotations

import json
import re

from memory import prompts

_MSG = re.compile(r"^\[(\d+)\] (user|assistant|tool)(?: \([^)]*\))?(?: \(already stored\))?: (.*)$", re.M)


def _section(text: str, start: str, end: str | None = None) -> str:
    body = text.split(start, 1)[1] if start in text else ""
    return body.split(end, 1)[0] if end and end in body else body


def turn_answer(user_prompt: str) -> dict:
    msgs = [(int(n), role, body) for n, role, body in _MSG.findall(user_prompt)]
    needs = re.search(r"NEEDS TITLE: (.*)", user_prompt)
    wanted = [int(x) for x in re.findall(r"\d+", needs.group(1))] if needs else []
    titles = {str(n): " ".join(body.split()[:10]) for n, _, body in msgs if n in wanted}
    facts = []
    for n, role, body in msgs:
        if role != "user":
            continue
        text = body.strip()
        is_query = text.endswith(("?", "？", "吗")) or text.lower().startswith(("what", "how", "recommend", "推荐"))
        facts.append({"text": text, "category": "about_you", "tags": ["chat"],
                      "intent": "query" if is_query else "statement", "from": [n]})
    dedup = [{"message": int(m), "verdict": "NEW", "target": None, "merged": None}
             for m in re.findall(r"message (\d+) resembles", user_prompt)]
    # Folded reconciliation: decided against KNOWN FACTS the way reconcile_answer decides.
    known = {text.strip().lower(): int(i) for i, text in
             re.findall(r"^\[(\d+)\] \([^)]*\) (.*)$", _section(user_prompt, "KNOWN FACTS", "CURRENT TASK"), re.M)}
    for f in facts:
        if f["text"].strip().lower() in known:
            f["known"], f["action"] = known[f["text"].strip().lower()], "NOOP"
    answer = {"titles": titles, "dedup": dedup, "facts": facts}
    if "CURRENT TASK" in user_prompt:
        answer["task"] = boundary_answer(user_prompt)
    return answer


def boundary_answer(user_prompt: str) -> dict:
    """The boundary verdict, as the separate judge prompt is answered below."""
    return {"verdict": "SAME", "confidence": 0.9}


def batch_answer(user_prompt: str, turn=turn_answer) -> dict:
    """A batched ingest prompt: each "TURN k" part answered on its own, and a fact repeating one
    given for an earlier turn marked as such (decided as reconcile_answer decides)."""
    parts = re.split(r"^TURN (\d+)$", user_prompt, flags=re.M)
    turns = {k: turn(body) for k, body in zip(parts[1::2], parts[2::2])}
    given: dict[str, list[int]] = {}
    for k, answer in turns.items():
        for f in answer.get("facts", []):
            earlier = given.get(f["text"].strip().lower())
            if earlier and "known" not in f:
                f["earlier"], f["action"] = earlier, "NOOP"
        for i, f in enumerate(answer.get("facts", []), start=1):
            given.setdefault(f["text"].strip().lower(), [int(k), i])
    return {"turns": turns}


def reconcile_answer(user_prompt: str) -> dict:
    existing = re.findall(r"^\[(\d+)\] \([^)]*\) (.*)$", _section(user_prompt, "EXISTING", "NEW"), re.M)
    new = re.findall(r"^\((\w+)\) (.*)$", _section(user_prompt, "NEW"), re.M)
    known = {text.strip().lower(): int(i) for i, text in existing}
    return {"decisions": [{"new": letter, "action": "NOOP" if text.strip().lower() in known else "ADD",
                           "target": known.get(text.strip().lower()), "text": None} for letter, text in new]}


def reply(request: dict) -> str:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return "From what I found: " + last["content"][:200]
    system = request["messages"][0]["content"]
    remembered = "memory-context" in system and "No stored memory matched" not in system
    return ("I remember our earlier talks. " if remembered else "") + f"You said: {last['content'][:80]}"


def respond(request: dict) -> str:
    """The responder for FakeLLM: dispatch on memgate's prompt."""
    system = request["messages"][0]["content"] if request["messages"][0]["role"] == "system" else ""
    user = next((m["content"] for m in request["messages"] if m["role"] == "user"), "")
    if system.startswith(prompts.TURN_SYSTEM[:40]):
        answer = batch_answer(user) if prompts.TURN_BATCH_NOTE in system else turn_answer(user)
        return json.dumps(answer, ensure_ascii=False)
    if system.startswith(prompts.RECONCILE_SYSTEM[:40]):
        return json.dumps(reconcile_answer(user), ensure_ascii=False)
    if system.startswith(prompts.FACTS_ONLY_SYSTEM[:40]):
        return json.dumps({"facts": turn_answer(user.replace(". ", "] user: ", 1))["facts"]}, ensure_ascii=False)
    if system.startswith((prompts.TASK_BOUNDARY_SYSTEM[:40], prompts.TASK_BOUNDARY_RECHECK_SYSTEM[:40])):
        return json.dumps(boundary_answer(user))
    if system.startswith(prompts.TASK_SUMMARY_SYSTEM[:40]):
        first = next((line for line in user.splitlines() if line.strip()), "task")
        return json.dumps({"title": first[:60], "goal": first[:120], "steps": [], "result": "done", "details": []},
                          ensure_ascii=False)
    if system.startswith(prompts.SKILL_DECIDE_SYSTEM[:40]):
        return json.dumps({"match": None, "reusable": False, "reason": "one-off"})
    return reply(request)
