"""Wires tasks and skills (DESIGN section 6) into the bot: the post-ingest hook, the tools,
the chat commands and the scheduler jobs."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.scheduler import JobSpec
from bot.task_views import format_skill, format_skills, format_task, format_tasks
from bot.tools import ToolBox, ToolContext, function_schema
from memory.embed import Embedder
from memory.tasks.skills import SkillEvolver
from memory.tasks.processor import TaskProcessor

if TYPE_CHECKING:
    from bot.app import App
    from bot.commands import CommandContext

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


def wire_tasks(app: App, tools: ToolBox, embedder: Embedder) -> list[JobSpec]:
    """Create the TaskProcessor and SkillEvolver, register their tools and commands; return jobs."""
    llm = app.memory_llm
    tasks = TaskProcessor(app.store, embedder, llm, clock=app.clock)
    skills = SkillEvolver(app.store, embedder, llm, app.settings.data_path, clock=app.clock)
    app.extras["tasks"] = tasks
    app.extras["skills"] = skills
    app.engine.worker.on_ingested = tasks.assign
    if app.gateway.agent is not None:
        app.gateway.agent.skills = skills

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
        s = await skills.publish(str(args["name"]), ctx.write_space, ctx.public_space)
        return {"published": s.name, "space": "public"}

    for name, handler in (("task_summary", task_summary), ("skill_search", skill_search),
                          ("skill_get", skill_get), ("skill_publish", skill_publish)):
        tools.register(TASK_TOOL_SCHEMAS[name], handler)

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

    app.commands.register("tasks", cmd_tasks, "/tasks [ID]: recent tasks and their status")
    app.commands.register("skills", cmd_skills, "/skills [query]: skills learned from your tasks")
    app.commands.register("skill", cmd_skill, "/skill NAME: a skill's SKILL.md and its versions")

    s = app.settings.scheduler

    async def close_tasks() -> None:
        await tasks.close_idle()

    async def evolve_skills() -> None:
        await skills.evolve_pending()

    return [JobSpec("close_tasks", close_tasks, timedelta(minutes=s.close_tasks_minutes)),
            JobSpec("evolve_skills", evolve_skills, timedelta(minutes=s.evolve_skills_minutes))]
