"""The composition root: builds every concrete object from Settings and owns their lifecycle.

Everything else receives what it needs. `App` is an async context manager: entering starts
the ingest worker (which first drains what a previous run left), the scheduler and the
channels; leaving stops channels first, answers what is queued, drains ingestion, closes the
database. After a signal (`stopping`) no memory call starts: what is left to ingest waits in
the durable queue for the next start.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.access.linking import LINKING_ERASE, LINKING_MIGRATIONS, Linking
from bot.access.pairing import Pairing
from bot.access.policy import Access
from bot.access.schema import ACCESS_ERASE, ACCESS_MIGRATIONS
from bot.channel import CancelsReplies, Channel, HasLocalCommands, ReportsTrouble, ShowsCommandMenu
from bot.delivery.inbox import INBOX_ERASE, INBOX_MIGRATIONS
from bot.history_file import HISTORY_NAME
from bot.history_file import scrub as scrub_history
from bot.delivery.outbox import OUTBOX_ERASE, OUTBOX_MIGRATIONS, Outbox, OutboxSettings
from bot.media.setup import media_reader
from bot.model_clients import make_embedder, make_llm
from bot.model_servers import down_hint, route_fix, shown_address
from bot.observe import Observers
from bot.settings import Settings
from bot.turn.agent import Agent, AgentSettings
from bot.turn.approvals import Approvals
from bot.turn.approvals import register_commands as register_approval_commands
from bot.turn.commands import Commands
from bot.turn.gateway import Gateway, GatewaySettings
from bot.turn.sessions import SESSION_MIGRATIONS, Sessions
from bot.turn.reminder_wiring import wire_reminders
from bot.turn.task_wiring import TaskHost, wire_tasks
from bot.turn.tools import ToolBox
from bot.usage import USAGE_ERASE, USAGE_MIGRATIONS, UsageRecorder
from memory.embed import Embedder
from memory.engine import MemoryEngine
from memory.erase import EraseRules
from memory.ingest.capture import pending_count
from memory.ingest.settings import IngestSettings
from memory.llm import LiteLLM, set_offline_env
from memory.llm_gate import MEMORY, ModelGates
from memory.recall.search import RecallSettings
from memory.store.backend import open_store as open_backend
from memory.private_files import loose_paths, private_dir, restrict_umask
from memory.store.connection import Store

log = logging.getLogger(__name__)

# How long a person leaving the terminal waits for the ingestion in progress before it stops.
QUICK_EXIT_SECONDS = 0.5


def erase_rules() -> EraseRules:
    """What an erase reaches in every layer's tables besides those with a `space_id` (memory.erase)."""
    from bot.api.jobs import JOB_ERASE
    from bot.scheduler import SCHEDULER_ERASE

    from bot.delivery.drafts import DRAFT_ERASE

    # Dependents go in this order, each before the rows it is found through.
    return ACCESS_ERASE + LINKING_ERASE + DRAFT_ERASE + INBOX_ERASE + OUTBOX_ERASE + USAGE_ERASE + JOB_ERASE + SCHEDULER_ERASE


def open_store(settings: Settings, extra: Sequence = ()) -> Store:
    """The database `[store] url` names, with every layer's migrations (a locked DuckDB file
    raises StoreLockedError)."""
    from bot.api.jobs import JOB_MIGRATIONS
    from bot.access.api_keys import KEY_MIGRATIONS
    from bot.reminders.store import REMINDER_MIGRATIONS
    from bot.scheduler import SCHEDULER_MIGRATIONS

    private_dir(settings.data_path)
    dim = settings.embedding.dim
    migrations = (*ACCESS_MIGRATIONS, *LINKING_MIGRATIONS, *SESSION_MIGRATIONS, *SCHEDULER_MIGRATIONS, *KEY_MIGRATIONS,
                  *USAGE_MIGRATIONS, *INBOX_MIGRATIONS, *OUTBOX_MIGRATIONS, *JOB_MIGRATIONS,
                  *REMINDER_MIGRATIONS, *extra)
    return open_backend(settings.store_url, dim, extra_migrations=migrations, password=settings.secret("store_password"))


# Threads for the blocking calls the loop hands off (asyncio.to_thread: every database read and
# write, recall, embeddings, synchronous HTTP clients). Python's default is cores + 4 = 6 on a
# 2-core machine; with 30 busy chats most of those sat waiting for the writer or a socket while
# the next turn's calls queued behind them: 200-300 ms of waiting per call, ~10 calls a turn.
# A waiting thread costs no CPU, so the pool is sized for waiting, not for the cores.
BLOCKING_THREADS = 32
_sized_loops: weakref.WeakSet = weakref.WeakSet()


def _enough_blocking_threads(loop) -> None:
    """Give the loop a default executor of BLOCKING_THREADS threads (once per loop; asyncio.run
    shuts it down with the loop)."""
    if loop in _sized_loops:
        return
    from concurrent.futures import ThreadPoolExecutor

    loop.set_default_executor(ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="memgate-blocking"))
    _sized_loops.add(loop)


@dataclass
class App:
    settings: Settings
    store: Store
    engine: MemoryEngine
    access: Access
    pairing: Pairing
    linking: Linking
    sessions: Sessions
    gateway: Gateway
    commands: Commands
    llm: LiteLLM | None
    memory_llm: LiteLLM | None
    clock: Callable[[], datetime]
    extras: dict[str, Any] = field(default_factory=dict)
    gates: ModelGates = field(default_factory=ModelGates)
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _warming: Any = None
    # Set before leaving when the person at the terminal left: leaving then takes about a second
    # (ingestion stops where it is; the durable queue keeps the rest for the next start), and
    # `pending_memory` says how many turns wait there. Otherwise (a signal, a service stopping)
    # what is due is ingested first, as long as `[ingest]` allows.
    quick_exit: bool = False
    pending_memory: int = 0

    async def warmed_up(self) -> None:
        """Return once litellm, jieba and the embedding model are loaded (turns are served
        before that; the first of them waits for what it needs)."""
        import asyncio

        if self._warming is not None:
            await asyncio.wait([self._warming])

    async def __aenter__(self) -> App:
        import asyncio

        _enough_blocking_threads(asyncio.get_running_loop())
        # Heavy libraries load in a thread while the loop already serves (DESIGN section 8).
        self._warming = asyncio.create_task(asyncio.to_thread(self._warm_up), name="warm-up")
        self._stack.push_async_callback(asyncio.wait, [self._warming])
        _warn_loose(self.settings)
        await self.engine.ensure_space(self.access.PUBLIC_SPACE, "public", "shared by everyone let in")
        await self.engine.worker.start()
        self._stack.push_async_callback(self._close_store)
        # A forget's rewrite still waiting for its delay is left to the store's close (done there, at once).
        self._stack.push_async_callback(self.engine.rewrites.stop)
        usage = self.extras.get("usage")
        if usage is not None:
            self._stack.push_async_callback(usage.aflush)
        self._stack.push_async_callback(self._stop_ingest)
        scheduler = self.extras.get("scheduler")
        if scheduler is not None:
            await scheduler.start()
            self._stack.push_async_callback(scheduler.stop)
        # The menus as the channels start, with every command registered by now (tasks and skills
        # are wired after the channels were added: a menu taken then left them off Telegram's).
        for ch in self.gateway.channels.values():
            if isinstance(ch, ShowsCommandMenu):
                ch.set_command_menu(self.commands.menu())
        await self.gateway.start()
        self._stack.push_async_callback(self.gateway.stop)
        reminders = self.extras.get("reminder_delivery")
        if reminders is not None:  # after the channels: a reminder missed while down goes out now
            await reminders.start()
            self._stack.push_async_callback(reminders.stop)
        api = self.extras.get("api")
        if api is not None:
            # Last in, first out: the API stops before the channels and the database go away.
            await self._stack.enter_async_context(api)
        return self

    def stopping(self) -> None:
        """Stop begins (a signal, the person left): no memory call starts from here on and the
        ones in flight are cut; their turns stay in the durable queue for the next start. Replies
        already accepted are still answered (the gateway's stop)."""
        self.gates.close(MEMORY)

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def _warm_up(self) -> None:
        """Import and warm litellm, jieba's dictionary and the embedding model (blocking)."""
        from memory.text import tokenize

        steps = [("jieba", lambda: tokenize("预热 warm up")), ("embedding model", lambda: self.engine.embedder.embed_query("warm up"))]
        steps += [(f"LLM {llm.settings.model}", llm.warm) for llm in {id(x): x for x in (self.llm, self.memory_llm) if x}.values()]
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # a failed warm-up only means the first use pays for it
                log.warning("warming up %s failed: %s", what, exc)
        # The last of the start-up work: from here on a gateway that is up stays up (its one
        # "ready" line, which a service's log, and the headless tests, wait for).
        log.info("ready: %s loaded", ", ".join(dict.fromkeys(what for what, _ in steps)))

    async def _close_store(self) -> None:
        self.store.close()

    async def _stop_ingest(self) -> None:
        import asyncio

        if not self.quick_exit:
            await self.engine.worker.stop()
            return
        await self.engine.worker.stop(drain=False, timeout=QUICK_EXIT_SECONDS)
        try:
            self.pending_memory = await asyncio.to_thread(pending_count, self.store)
        except Exception:  # only for the goodbye line: never a reason to fail leaving
            log.warning("could not count the turns still to ingest", exc_info=True)


def build_app(settings: Settings, *, channels: Sequence[Channel] = (), clock: Callable[[], datetime] | None = None,
              store: Store | None = None, embedder: Embedder | None = None, serve_api: bool = False) -> App:
    """Wire the whole bot from settings (channels are built by the CLI, which knows the flags)."""
    set_offline_env()
    # Everything this process writes from here on (database, WAL, logs, caches, SKILL.md files)
    # is its owner's alone, whatever umask it was started with.
    restrict_umask()
    clock = clock or (lambda: datetime.now(UTC))
    store = store or open_store(settings)
    embedder = embedder or make_embedder(settings)
    recorder = UsageRecorder(store)
    # Turns, sends and recalls are reported here; the API's metrics join when it is served.
    observers = Observers(recorder)
    gates = ModelGates()   # one per model server, shared by the reply and the memory LLM
    llm = make_llm(settings, recorder, gates=gates)
    memory_llm = make_llm(settings, recorder, memory=True, gates=gates)
    m = settings.memory
    recall = RecallSettings(inject_items=m.inject_items, inject_tokens=m.inject_tokens, search_default=m.search_default,
                            search_max=m.search_max, half_life_days=m.half_life_days, decay_floor=m.decay_floor,
                            mmr_lambda=m.mmr_lambda, fusion=m.fusion, min_confidence=m.min_confidence)
    ingest = IngestSettings(dedup_threshold=m.dedup_threshold, fact_candidate_threshold=m.fact_candidate_threshold,
                            max_attempts=m.max_ingest_attempts, max_facts_per_turn=m.max_facts_per_turn,
                            workers=m.ingest_workers, batch_tokens=m.ingest_batch_tokens,
                            backlog_max=m.ingest_backlog_max)
    extras: dict[str, Any] = {}
    engine = MemoryEngine(store, embedder, memory_llm, data_dir=settings.data_path, recall_settings=recall,
                          ingest_settings=ingest, clock=clock)
    tools = ToolBox(engine)
    access = Access(store, settings.access, clock=clock)
    pairing, linking = Pairing(access), Linking(access)
    access.doorbell = pairing       # strangers' DMs ring the pairing desk
    sessions = Sessions(store, idle=timedelta(hours=settings.agent.session_idle_hours), clock=clock)
    commands = Commands(engine=engine, access=access, pairing=pairing, linking=linking, clock=clock, extra=extras)
    approvals = Approvals(clock=clock)   # writes beyond the speaker's space wait for their /confirm
    register_approval_commands(commands, approvals, access)
    agent = None
    if llm is not None:
        a = settings.agent
        agent = Agent(engine, llm, tools, AgentSettings(name=a.name, max_tool_rounds=a.max_tool_rounds,
                                                        turn_timeout=a.turn_timeout, extra_system=a.system_prompt,
                                                        max_message_chars=a.max_message_chars,
                                                        max_reply_chars=a.max_reply_chars,
                                                        document_chunk_chars=settings.media.document_chunk_chars,
                                                        model_address=shown_address(settings.llm.api_base, settings.llm.model),
                                                        down_hint=down_hint(settings.llm.api_base, settings.llm.model),
                                                        model=settings.llm.model, route_fix=route_fix(settings.llm.model)),
                      clock=clock, observer=observers, approvals=approvals)
    gateway = Gateway(access=access, sessions=sessions, agent=agent, commands=commands, clock=clock,
                      settings=GatewaySettings(queue_size=settings.agent.queue_size,
                                               history_tokens=settings.agent.history_tokens,
                                               public_space=access.PUBLIC_SPACE,
                                               storage_retry=settings.delivery.storage_retry_seconds,
                                               keep_receipts_days=settings.delivery.keep_receipts_days,
                                               takeover_every=settings.store.takeover_seconds,
                                               media_retry=settings.media.retry_minutes * 60,
                                               media_attempts=settings.media.max_attempts,
                                               media_waiting_per_person=settings.media.max_waiting_per_person,
                                               media_waiting=settings.media.max_waiting),
                      outbox_settings=OutboxSettings(retry_base=settings.delivery.retry_base_seconds,
                                                     retry_cap=settings.delivery.retry_cap_seconds,
                                                     give_up_hours=settings.delivery.give_up_hours),
                      observer=observers, media=media_reader(settings, llm.settings.model) if llm is not None else None)
    # A forget reaches the replies still waiting in the outbox (memory/ does not know that table).
    engine.add_forget_hook(Outbox.scrub_forgotten)
    # Before the menus: /remind is on them. Started in App.__aenter__, after the channels.
    extras.update(wire_reminders(settings.reminders, store, clock, gateway, commands, tools))
    # An erase reaches every layer's tables, and the people it removed leave the identity cache.
    engine.erase_rules = erase_rules()
    engine.erase_hooks.append(access.drop_cached)
    # The terminal's input history is a file in the data folder: forgotten and erased words leave it too.
    history = settings.data_path / HISTORY_NAME
    engine.add_forget_hook(lambda _con, texts, _spaces: scrub_history(history, texts))
    engine.erase_hooks.append(lambda _spaces, texts: scrub_history(history, texts))
    for ch in channels:
        gateway.add_channel(ch)
        # A channel in trouble (a lost login, replies refused) tells the owner, on another channel if need be.
        if isinstance(ch, ReportsTrouble) and ch.on_trouble is None:
            ch.on_trouble = gateway.notify_owner
        if isinstance(ch, CancelsReplies) and ch.on_cancel is None:
            ch.on_cancel = gateway.cancel_turn
    # A command one channel answers itself (the terminal's /quit) is in /help, not on another
    # platform's menu.
    for ch in channels:
        if isinstance(ch, HasLocalCommands):
            for name, help_text in ch.local_commands():
                commands.register(name, _answered_by(ch.name), help_text, menu=False)
    app = App(settings=settings, store=store, engine=engine, access=access, pairing=pairing, linking=linking,
              sessions=sessions, gateway=gateway,
              commands=commands, llm=llm, memory_llm=memory_llm, clock=clock, extras=extras, gates=gates)
    extras["usage"] = recorder
    extras["observers"] = observers
    _wire_tasks_and_jobs(app, tools, embedder)
    if serve_api:
        _wire_api(app, embedder)
    return app


def _warn_loose(settings: Settings) -> None:
    """One warning when files in the data folder are readable by other accounts (doctor says how to fix)."""
    loose = loose_paths(settings.data_path)
    if loose:
        log.warning("%d path(s) in %s can be read by other accounts (e.g. %s, mode %o): run `memgate doctor`",
                    len(loose), settings.data_path, loose[0][0], loose[0][1])


def _answered_by(channel: str):
    """The gateway's answer to a command that only `channel` acts on, sent from elsewhere."""
    async def answer(ctx) -> str:
        return f"That works in the {channel} chat only."
    return answer


def _wire_api(app: App, embedder: Embedder) -> None:
    """The HTTP API (issue 11) on the gateway's loop, sharing its engine, access and store."""
    from bot.access.policy import API_KEY_CHANNEL
    from bot.api.attached import AttachedTerminals
    from bot.api.context import ApiHost
    from bot.api.jobs import queue_depth_and_age
    from bot.access.api_keys import Keys
    from bot.api.metrics import Metrics
    from bot.api.server import ApiServer, ServerSettings, create_app
    from memory.tasks.skill_library import SkillLibrary

    a = app.settings.api
    server = ServerSettings(host=a.host, port=a.port, max_body_bytes=int(a.max_body_mb * 1024 * 1024),
                            rate_per_minute=a.rate_limit_per_minute, rate_burst=a.rate_limit_burst,
                            session_idle_seconds=a.session_idle_minutes * 60, public_url=a.public_url,
                            allowed_hosts=a.allowed_hosts, login_per_minute=a.login_per_minute,
                            login_burst=a.login_burst, sessions_per_key=a.sessions_per_key,
                            streams_per_key=a.streams_per_key)
    keys = Keys(app.store, clock=app.clock)
    metrics = Metrics(queue=lambda: app.store.read(lambda c: queue_depth_and_age(c, app.clock())))
    app.extras["usage"].listener = metrics.llm_call
    app.extras["observers"].add(metrics)
    scheduler = app.extras.get("scheduler")
    # `memgate chat` attaches through the API: its terminals are the gateway's console channel (the
    # gateway's own terminal, if it reads one, behind them).
    chats = AttachedTerminals(local=app.gateway.channels.get(AttachedTerminals.name))
    if chats.local is None:  # the terminal's own commands (/quit) are in /help for attached terminals too
        for name, help_text in chats.local_commands():
            app.commands.register(name, _answered_by(chats.name), help_text, menu=False)
    app.gateway.add_channel(chats)
    key_chats = AttachedTerminals(name=API_KEY_CHANNEL)   # terminals attached with a space key
    app.gateway.add_channel(key_chats)
    host = ApiHost(access=app.access, pairing=app.pairing, tell=app.gateway.tell, skills=SkillLibrary(app.store, embedder, app.settings.data_path, clock=app.clock),
                   public_space=app.access.PUBLIC_SPACE,
                   # Attached terminals come and go: /healthz lists the console only when this gateway reads one.
                   channels=lambda: {name: up for name, up in app.gateway.channel_health().items()
                                     if name not in (chats.name, key_chats.name) or (name == chats.name and chats.local is not None)},
                   job_statuses=scheduler.status if scheduler is not None else list,
                   flush_usage=app.extras["usage"].aflush, chats=chats, key_chats=key_chats,
                   bot_name=app.settings.agent.name, cancel=app.gateway.cancel_turn,
                   commands=tuple(c.name for c in app.commands.menu()), reminders=app.extras.get("reminders"))
    web_app = create_app(app.engine, keys, host, metrics, settings=server, clock=app.clock)
    app.extras["metrics"] = metrics
    app.extras["api"] = ApiServer(web_app, keys, app.settings.data_path, server)


def _wire_tasks_and_jobs(app: App, tools: ToolBox, embedder: Embedder) -> None:
    """Tasks, skills and the scheduler jobs (DESIGN section 6)."""
    from bot.scheduler import JobSpec, Scheduler
    from memory.store.keywords import fresh_count

    s = app.settings.scheduler
    engine = app.engine

    async def rebuild_fts() -> None:
        import asyncio

        if await asyncio.to_thread(engine.store.read, fresh_count):
            await asyncio.to_thread(engine.rebuild_fts)

    async def retry_ingest() -> None:
        await engine.worker.drain()
        await engine.worker.extract_pending_facts()

    async def flush_usage() -> None:
        await app.extras["usage"].aflush()

    async def prune_turn_text() -> None:
        # What the design needs of an ingested turn is its receipt; its words live on as memories.
        from bot.turn.sessions import HISTORY_TURNS
        from memory.ingest.queue import prune_turn_text as prune
        from memory.store.rows import utc_naive

        cutoff = utc_naive(app.clock()) - timedelta(days=app.settings.memory.keep_turn_text_days)
        pruned = await engine.store.awrite(lambda c: prune(c, cutoff, HISTORY_TURNS))
        if pruned:
            log.info("emptied the words of %d ingested turns older than %s days (their receipts stay)",
                     pruned, app.settings.memory.keep_turn_text_days)

    async def forget_raw() -> None:
        # Opt-in retention: raw messages go once learnt from, the way a forget goes (memory.retention).
        from memory.retention import forget_raw as forget_old

        cutoff = app.clock() - timedelta(days=app.settings.memory.forget_raw_after_days)
        gone = 0
        while n := await engine.store.awrite(lambda c: forget_old(c, cutoff, app.clock())):
            gone += n
        if gone:
            engine.rewrites.soon()
            log.info("retention: forgot %d raw messages older than %s days", gone, app.settings.memory.forget_raw_after_days)

    jobs = [JobSpec("rebuild_fts", rebuild_fts, timedelta(minutes=s.fts_rebuild_minutes)),
            JobSpec("flush_usage", flush_usage, timedelta(minutes=1)),
            JobSpec("prune_turn_text", prune_turn_text, timedelta(hours=1)),
            JobSpec("retry_ingest", retry_ingest, timedelta(minutes=s.retry_ingest_minutes)),
            *app.extras.get("reminder_jobs", ())]
    if app.settings.memory.forget_raw_after_days > 0:
        jobs.append(JobSpec("forget_raw", forget_raw, timedelta(hours=1)))
    if app.memory_llm is not None:
        wired = wire_tasks(TaskHost(store=app.store, engine=engine, llm=app.memory_llm, embedder=embedder,
                                    tools=tools, commands=app.commands, agent=app.gateway.agent,
                                    data_path=app.settings.data_path, schedule=s, clock=app.clock))
        app.extras["tasks"] = wired.tasks
        app.extras["skills"] = wired.skills
        jobs += wired.jobs
    app.extras["scheduler"] = Scheduler(app.store, clock=app.clock, jobs=jobs)
