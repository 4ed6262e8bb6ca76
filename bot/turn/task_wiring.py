"""Wires tasks and skills (DESIGN section 6) into the bot: the post-ingest hook, the tools,
the chat commands and the scheduler jobs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.scheduler import JobSpec
from bot.turn.tools import PROPOSED, PUBLIC_WRITE_REFUSED, ToolBox, ToolContext, function_schema
from bot.turn.views.tasks import format_skill, format_skills, format_task, format_tasks
from memory.embed import Embedder
from memory.tasks.processor import TaskProcessor
from memory.tasks.skills import SkillEvolver

if TYPE_CHECKING:
    from bot.settings import SchedulerConfig
    from bot.turn.agent import Agent
    from bot.turn.commands import CommandContext, Commands
    from memory.engine import MemoryEngine
    from memory.llm import LLM
    from memory.store.connection import Store

TASK_TOOL_SCHEMAS = {
    "task_summary": function_schema("task_summary", "Read the summary of a past task (ids of kind 'task' appear in memory results).",
                        {"id": {"type": "string"}}, ["id"]),
    "skill_search": function_schema("skill_search", "Find a reusable how-to skill distilled from earlier tasks.",
                        {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 10}}, ["query"]),
    "skill_get": function_schema("skill_get", "Read a skill's SKILL.md (steps, pitfalls, key commands) by name or id.",
                     {"name": {"type": "string"}}, ["name"]),
    "skill_publish": function_schema("skill_publish", "Share one of the user's skills with everyone (public space), when they ask.",
                         {"name": {"type": "string"}}, ["name"]),
}


@dataclass(frozen=True, slots=True)
class TaskHost:
    """What task wiring needs from the composition root, handed over so it never imports the app."""

    store: Store
    engine: MemoryEngine
    llm: LLM
    embedder: Embedder
    tools: ToolBox
    commands: Commands
    agent: Agent | None
    data_path: Path
    schedule: SchedulerConfig
    clock: Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class TaskWiring:
    """What wiring made: the processor, the evolver and their scheduler jobs."""

    tasks: TaskProcessor
    skills: SkillEvolver
    jobs: list[JobSpec]


def wire_tasks(host: TaskHost) -> TaskWiring:
    """Create the TaskProcessor and SkillEvolver, register their tools and commands and jobs."""
    tools = host.tools
    tasks = TaskProcessor(host.store, host.embedder, host.llm, clock=host.clock)
    skills = SkillEvolver(host.store, host.embedder, host.llm, host.data_path, clock=host.clock)
    host.engine.worker.on_ingested = tasks.assign
    host.engine.worker.task_gap = tasks.settings.idle_gap  # the ingest call gives the boundary verdicts
    if host.agent is not None:
        host.agent.skills = skills

    async def task_summary(args: dict, ctx: ToolContext) -> Any:
        view = await tasks.summary(str(args["id"]), ctx.space_ids)
        if view is None:
            return {"error": "no such task"}
        return {"id": view.id, "status": view.status, "text": format_task(view)}

    async def skill_search(args: dict, ctx: ToolContext) -> Any:
        found = await skills.search(str(args["query"]), ctx.space_ids, limit=int(args.get("limit") or 5))
        return {"skills": [{"name": s.name, "description": s.description, "version": s.version} for s in found]}

    async def skill_get(args: dict, ctx: ToolContext) -> Any:
        s = await skills.get(str(args["name"]), ctx.space_ids)
        return {"name": s.name, "version": s.version, "content": s.content} if s else {"error": "no such skill"}

    async def skill_publish(args: dict, ctx: ToolContext) -> Any:
        if not ctx.may_write_public:           # a published skill reaches every user's prompt
            return {"error": PUBLIC_WRITE_REFUSED}
        s = await skills.get(str(args["name"]), [ctx.write_space])
        if s is None:
            return {"error": "no such skill of this user"}

        async def publish() -> str:
            now = await skills.get(s.id, [ctx.write_space])
            if now is None or now.version != s.version:
                return f"The skill {s.name} changed since I proposed publishing it; nothing was published. Ask me again."
            done = await skills.publish(s.id, ctx.write_space, ctx.public_space)
            return f"Published the skill {done.name} for everyone."

        code = ctx.propose(f"publish your skill {s.name} (version {s.version}: {s.description}) to everyone", publish)
        return {"pending": code, "status": PROPOSED}

    for name, handler in (("task_summary", task_summary), ("skill_search", skill_search), ("skill_get", skill_get)):
        tools.register(TASK_TOOL_SCHEMAS[name], handler)
    tools.register(TASK_TOOL_SCHEMAS["skill_publish"], skill_publish, beyond=True)

    async def cmd_tasks(ctx: CommandContext) -> str:
        if ctx.args:
            view = await tasks.summary(ctx.args.strip(), ctx.tools.space_ids)
            return format_task(view) if view else f"No task {ctx.args}."
        return format_tasks(await tasks.recent(ctx.allowed.write_space))

    async def cmd_skills(ctx: CommandContext) -> str:
        found = await skills.search(ctx.args, ctx.tools.space_ids, limit=20) if ctx.args else \
            await skills.search("*", ctx.tools.space_ids, limit=20)
        return format_skills(found)

    async def cmd_skill(ctx: CommandContext) -> str:
        if not ctx.args:
            return "Usage: /skill NAME"
        s = await skills.get(ctx.args.strip(), ctx.tools.space_ids)
        if s is None:
            return f"No skill named {ctx.args}."
        return format_skill(s, await skills.history(s.id, ctx.tools.space_ids))

    host.commands.register("tasks", cmd_tasks, "/tasks [ID]: recent tasks and their status")
    host.commands.register("skills", cmd_skills, "/skills [query]: skills learned from your tasks")
    host.commands.register("skill", cmd_skill, "/skill NAME: a skill's SKILL.md and its versions")

    s = host.schedule

    async def close_tasks() -> None:
        await tasks.close_idle()

    async def evolve_skills() -> None:
        await skills.evolve_pending()

    jobs = [JobSpec("close_tasks", close_tasks, timedelta(minutes=s.close_tasks_minutes)),
            JobSpec("evolve_skills", evolve_skills, timedelta(minutes=s.evolve_skills_minutes))]
    return TaskWiring(tasks=tasks, skills=skills, jobs=jobs)
