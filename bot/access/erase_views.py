"""What an erase of a person shows, without the database: the plan (whose spaces, which identities
become strangers, how many facts, messages, tasks, skills and reminders), its wire format and its
texts. The command line imports this to print what a running gateway sent, and must stay quick.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUPS_STAY = ("What was said in group chats stays with those groups (a group's memory is the group's, "
               "not one member's), and the shared public notes stay.")


@dataclass(frozen=True, slots=True)
class ErasePlan:
    """What an erase removes (`done`: what it removed)."""

    spaces: tuple[str, ...]
    people: tuple[str, ...]        # identities (channel:id) that become strangers
    facts: int = 0
    messages: int = 0              # what was said (chunks) and turns still waiting to become memory
    tasks: int = 0
    skills: int = 0
    reminders: int = 0
    done: bool = False

    @property
    def total(self) -> int:
        return self.facts + self.messages + self.tasks + self.skills + self.reminders


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def counts_text(p: ErasePlan) -> str:
    """"12 facts, 30 messages, 2 tasks, 0 skills and 1 reminder"."""
    parts = [_n(p.facts, "fact"), _n(p.messages, "message"), _n(p.tasks, "task"), _n(p.skills, "skill"),
             _n(p.reminders, "reminder")]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def plan_text(p: ErasePlan) -> str:
    """The operator's view (`memgate memory erase`), before or after."""
    if not p.people:
        who = "nobody signs in to it"
    elif len(p.people) == 1:
        who = f"{p.people[0]} {'is' if p.done else 'becomes'} a stranger"
    else:
        who = f"{', '.join(p.people)} {'are' if p.done else 'become'} strangers"
    head = "erased" if p.done else "would erase"
    return (f"{head}: space {', '.join(p.spaces)}: {counts_text(p)}; every conversation, session, API key and "
            f"file of it; {who}.\n{GROUPS_STAY}")


def plan_json(p: ErasePlan) -> dict:
    return {"spaces": list(p.spaces), "people": list(p.people), "facts": p.facts, "messages": p.messages,
            "tasks": p.tasks, "skills": p.skills, "reminders": p.reminders, "done": p.done}


def plan_from_json(d: dict) -> ErasePlan:
    return ErasePlan(tuple(d["spaces"]), tuple(d["people"]), d["facts"], d["messages"], d["tasks"], d["skills"],
                     d["reminders"], bool(d.get("done")))
