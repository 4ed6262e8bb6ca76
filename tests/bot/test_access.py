"""Access: pairing, policies, roles, groups and identity linking over a real DuckDB file."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.access import (
    ACCESS_MIGRATIONS, ALLOWLIST_TEXT, CODE_ALPHABET, DENIED_TEXT, DM_DISABLED_TEXT, GROUP_NOT_ALLOWED_TEXT,
    TOO_MANY_PENDING_TEXT, Access, AccessError, Allowed, Identity, Refused, Role, group_space_id, new_code,
    normalize_code, parse_role,
)
from bot.config import AccessConfig
from bot.errors import MemgateError
from bot.message import Message
from memory.store.rows import NewMemory, insert_memories
from memory.store.connection import Store
from tests.fakes.clock import FakeClock


@pytest.fixture
def astore(tmp_path):
    s = Store(tmp_path / "access.duckdb", 384, extra_migrations=ACCESS_MIGRATIONS)
    yield s
    s.close()


def make(store: Store, clock: FakeClock, **cfg) -> Access:
    return Access(store, AccessConfig(**cfg), clock=clock.now)


def dm(sender: str, *, channel: str = "telegram", name: str = "", text: str = "hi") -> Message:
    return Message(channel=channel, chat_id=sender, sender_id=sender, text=text,
                   timestamp=FakeClock().now(), sender_name=name)


def group(chat: str, sender: str, *, mention: bool = True, text: str = "hi", channel: str = "telegram") -> Message:
    return Message(channel=channel, chat_id=chat, sender_id=sender, text=text, timestamp=FakeClock().now(),
                   is_group=True, mentions_bot=mention)


def code_of(refused: Allowed | Refused) -> str:
    """The pairing code quoted in a refusal reply."""
    assert isinstance(refused, Refused) and refused.reply
    words = [w.strip(".,()`") for w in refused.reply.split()]
    codes = [w for w in words if len(w) == 8 and all(c in CODE_ALPHABET for c in w)]
    assert codes, refused.reply
    return codes[0]


async def let_in(access: Access, msg: Message, by: Identity | None = None) -> Identity:
    code = code_of(await access.check(msg))
    return await access.approve(code, by)


# --- pairing -----------------------------------------------------------------------------------
async def test_pairing_end_to_end_first_approval_becomes_owner(astore, clock):
    access = make(astore, clock)
    first = await access.check(dm("100", name="Ann"))
    code = code_of(first)
    assert f"/approve {code}" in first.reply and f"memgate pairing approve {code}" in first.reply
    [req] = await access.pending()
    assert (req.key, req.code, req.display_name, req.chat_id) == ("telegram:100", code, "Ann", "100")

    owner = await access.approve(code.lower(), None)          # typed in lower case: still the code
    assert owner.role is Role.OWNER and owner.space_id.startswith("u_") and owner.key == "telegram:100"
    assert await access.pending() == []
    ok = await access.check(dm("100", name="Ann"))
    assert isinstance(ok, Allowed)
    assert ok.space_ids == (owner.space_id, "public") and ok.write_space == owner.space_id
    kinds = dict(astore.read(lambda c: c.execute("SELECT id, kind FROM spaces").fetchall()))
    assert kinds[owner.space_id] == "user" and kinds["public"] == "public"

    # The second approval (by the owner) makes a plain user with a space of their own.
    bob = await let_in(access, dm("200", name="Bob"), by=owner)
    assert bob.role is Role.USER and bob.space_id not in (owner.space_id, "public")
    assert access.is_admin(owner) and not access.is_admin(bob)
    with pytest.raises(AccessError):
        await access.approve("ABCDEFGH", by=None)          # unknown code


async def test_configured_owner_needs_no_pairing_and_first_approval_is_a_user(astore, clock):
    access = make(astore, clock, owners=("telegram:1",))
    ok = await access.check(dm("1"))
    assert isinstance(ok, Allowed) and ok.identity.role is Role.OWNER
    stranger = await let_in(access, dm("2"), by=ok.identity)
    assert stranger.role is Role.USER


async def test_expired_code_cannot_be_approved(astore, clock):
    access = make(astore, clock, pairing_ttl_minutes=60)
    code = code_of(await access.check(dm("7")))
    clock.advance(minutes=61)
    assert await access.pending() == []
    with pytest.raises(AccessError, match="expired"):
        await access.approve(code, None)
    assert await access.identity("telegram", "7") is None
    assert isinstance(await access.check(dm("7")), Refused)
    again = code_of(await access.check(dm("7")))          # they can ask for a fresh code
    assert again != code and (await access.approve(again, None)).key == "telegram:7"


async def test_fourth_pending_stranger_is_refused(astore, clock):
    access = make(astore, clock, max_pending=3)
    codes = [code_of(await access.check(dm(str(i)))) for i in range(3)]
    fourth = await access.check(dm("99"))
    assert fourth == Refused(TOO_MANY_PENDING_TEXT)
    assert len(await access.pending()) == 3
    await access.approve(codes[0], None)                    # a slot frees up
    assert code_of(await access.check(dm("99")))


async def test_same_stranger_gets_the_same_code(astore, clock):
    access = make(astore, clock)
    one = code_of(await access.check(dm("5")))
    clock.advance(minutes=30)
    two = await access.check(dm("5"))
    assert code_of(two) == one and "30 more minutes" in two.reply
    assert len(await access.pending()) == 1


async def test_denied_stranger_hears_so_and_code_is_dead(astore, clock):
    access = make(astore, clock)
    code = code_of(await access.check(dm("5")))
    await access.deny(code, None)
    assert await access.pending() == []
    assert await access.check(dm("5")) == Refused(DENIED_TEXT)
    with pytest.raises(AccessError, match="denied"):
        await access.approve(code, None)


async def test_only_admins_approve(astore, clock):
    access = make(astore, clock, dm_policy="open")
    user = (await access.check(dm("1"))).identity
    strangers = make(astore, clock)
    code = code_of(await strangers.check(dm("2")))
    with pytest.raises(AccessError):
        await strangers.approve(code, by=user)
    with pytest.raises(AccessError):
        await strangers.deny(code, by=user)
    assert len(await strangers.pending()) == 1


@given(st.randoms(use_true_random=False))
def test_code_alphabet(rnd):
    code = new_code(rnd.choice)
    assert len(code) == 8 and not set(code) & set("0O1I") and set(code) <= set(CODE_ALPHABET)
    assert normalize_code(f" {code[:4].lower()}-{code[4:]} ") == code


def test_real_codes_use_the_alphabet():
    codes = {new_code() for _ in range(200)}
    assert len(codes) == 200 and all(len(c) == 8 and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert not set(CODE_ALPHABET) & set("0O1I")


# --- DM policies --------------------------------------------------------------------------------
async def test_allowlist_policy(astore, clock):
    access = make(astore, clock, dm_policy="allowlist", allow=("telegram:5",), owners=("telegram:1",))
    assert isinstance(await access.check(dm("5")), Allowed)
    assert isinstance(await access.check(dm("1")), Allowed)
    assert await access.check(dm("6")) == Refused(ALLOWLIST_TEXT)
    assert await access.pending() == [] and await access.identity("telegram", "6") is None


async def test_allowlist_lets_admins_in_but_not_plain_users(astore, clock):
    opened = make(astore, clock, dm_policy="open", owners=("telegram:1",))
    owner = (await opened.check(dm("1"))).identity
    await opened.check(dm("2"))
    await opened.check(dm("3"))
    await opened.set_role("telegram:2", Role.ADMIN, by=owner)
    access = make(astore, clock, dm_policy="allowlist", owners=("telegram:1",))
    assert isinstance(await access.check(dm("2")), Allowed)
    assert await access.check(dm("3")) == Refused(ALLOWLIST_TEXT)


async def test_open_policy_gives_everyone_a_private_space(astore, clock):
    access = make(astore, clock, dm_policy="open")
    a, b = await access.check(dm("1")), await access.check(dm("1", channel="wechat"))
    assert isinstance(a, Allowed) and isinstance(b, Allowed)
    assert a.identity.role is Role.USER and a.write_space != b.write_space
    assert (await access.check(dm("1"))).write_space == a.write_space


async def test_disabled_policy_refuses_all_but_owners(astore, clock):
    # A user let in under an earlier open policy is refused too once DMs are off.
    user = (await make(astore, clock, dm_policy="open").check(dm("3"))).identity
    access = make(astore, clock, dm_policy="disabled", owners=("telegram:1",))
    assert await access.check(dm("2")) == Refused(DM_DISABLED_TEXT)
    assert await access.check(dm("3")) == Refused(DM_DISABLED_TEXT)
    assert isinstance(await access.check(dm("1")), Allowed)
    assert await access.pending() == [] and user.key == "telegram:3"


async def test_console_is_always_allowed_and_owner_without_configured_owner(astore, clock):
    access = make(astore, clock, dm_policy="disabled")
    me = await access.check(dm("alice", channel="console"))
    assert isinstance(me, Allowed) and me.identity.role is Role.OWNER
    # The console's implicit owner does not stop the first chat approval from becoming owner.
    pairing = make(astore, clock)
    assert (await let_in(pairing, dm("9"))).role is Role.OWNER
    other = make(astore, clock, dm_policy="disabled", owners=("telegram:9",))
    bob = await other.check(dm("bob", channel="console"))
    assert isinstance(bob, Allowed) and bob.identity.role is Role.USER


# --- groups -------------------------------------------------------------------------------------
async def test_group_not_addressed_is_silent(astore, clock):
    access = make(astore, clock, groups=("telegram:-100",))
    assert await access.check(group("-100", "5", mention=False)) == Refused(None)
    ok = await access.check(group("-100", "5", mention=False, text="/help"))   # a command addresses the bot
    assert isinstance(ok, Allowed)


async def test_group_allowlist(astore, clock):
    access = make(astore, clock, groups=("telegram:-100",))
    ok = await access.check(group("-100", "5"))
    assert isinstance(ok, Allowed)
    gid = group_space_id("telegram", "-100")
    assert ok.space_ids == (gid, "public") and ok.write_space == gid
    assert astore.read(lambda c: c.execute("SELECT kind FROM spaces WHERE id = ?", [gid]).fetchone()) == ("group",)
    # The unknown member spoke in the group only: a DM still needs pairing.
    assert await access.identity("telegram", "5") is None
    assert code_of(await access.check(dm("5")))
    assert await access.check(group("-200", "5")) == Refused(GROUP_NOT_ALLOWED_TEXT)
    assert await access.check(group("-200", "5", mention=False)) == Refused(None)


async def test_group_open_disabled_and_no_mention(astore, clock):
    assert isinstance(await make(astore, clock, group_policy="open").check(group("-7", "1")), Allowed)
    off = make(astore, clock, group_policy="disabled", groups=("telegram:-7",))
    assert await off.check(group("-7", "1")) == Refused(None)
    chatty = make(astore, clock, group_policy="open", require_mention=False)
    assert isinstance(await chatty.check(group("-7", "1", mention=False)), Allowed)


async def test_known_member_in_group_gets_group_space_not_private(astore, clock):
    access = make(astore, clock, dm_policy="open", groups=("telegram:-1",))
    mine = (await access.check(dm("5"))).write_space
    ok = await access.check(group("-1", "5"))
    assert isinstance(ok, Allowed) and mine not in ok.space_ids and ok.identity.key == "telegram:5"


async def test_blocked_user_is_silently_refused(astore, clock):
    access = make(astore, clock, dm_policy="open", owners=("telegram:1",), groups=("telegram:-1",))
    owner = (await access.check(dm("1"))).identity
    await access.check(dm("2", name="Mallory"))
    blocked = await access.set_role("Mallory", Role.BLOCKED, by=owner)
    assert blocked.role is Role.BLOCKED
    assert await access.check(dm("2")) == Refused(None)
    assert await access.check(group("-1", "2")) == Refused(None)
    assert isinstance(await access.check(group("-1", "3")), Allowed)


def test_group_space_ids_are_readable_and_distinct():
    assert group_space_id("telegram", "-100123") == "g_telegram_-100123"
    odd = {group_space_id("wechat", "a@chatroom"), group_space_id("wechat", "a#chatroom"),
           group_space_id("wechat", "mp_1"), group_space_id("wechat_mp", "1"), group_space_id("wechat", "a_chatroom")}
    assert len(odd) == 5 and all(g.startswith("g_wechat") for g in odd)


# --- roles --------------------------------------------------------------------------------------
async def test_set_role_permissions(astore, clock):
    access = make(astore, clock, dm_policy="open", owners=("telegram:1",))
    owner = (await access.check(dm("1", name="Olive"))).identity
    adam = (await access.check(dm("2", name="Adam"))).identity
    ursula = (await access.check(dm("3", name="Ursula"))).identity
    await access.check(dm("4", name="Vic"))

    with pytest.raises(AccessError):
        await access.set_role("Vic", Role.BLOCKED, by=ursula)            # users cannot
    adam = await access.set_role("@adam", Role.ADMIN, by=owner)         # owner makes admins
    assert access.is_admin(adam) and adam.role is Role.ADMIN
    with pytest.raises(AccessError, match="only the owner"):
        await access.set_role("Ursula", Role.ADMIN, by=adam)            # admins cannot
    with pytest.raises(AccessError, match="owner"):
        await access.set_role("Olive", Role.BLOCKED, by=adam)           # nobody demotes the owner
    with pytest.raises(AccessError, match="owner"):
        await access.set_role("telegram:1", Role.USER, by=owner)
    assert (await access.set_role("telegram:4", Role.BLOCKED, by=adam)).role is Role.BLOCKED
    await access.set_role("Ursula", Role.ADMIN, by=owner)
    with pytest.raises(AccessError):
        await access.set_role("Ursula", Role.USER, by=adam)             # admins do not demote admins
    demoted = await access.set_role("Adam", Role.USER, by=owner)
    assert not access.is_admin(demoted) and not access.is_admin(adam)   # stale identity: latest role wins
    with pytest.raises(AccessError, match="no user"):
        await access.set_role("Nobody", Role.USER, by=owner)
    roles = {i.key: i.role for i in await access.users()}
    assert roles == {"telegram:1": Role.OWNER, "telegram:2": Role.USER, "telegram:3": Role.ADMIN,
                     "telegram:4": Role.BLOCKED}


async def test_ambiguous_names_and_role_parsing(astore, clock):
    access = make(astore, clock, dm_policy="open", owners=("telegram:1",))
    owner = (await access.check(dm("1"))).identity
    await access.check(dm("2", name="Sam"))
    await access.check(dm("3", name="sam"))
    with pytest.raises(AccessError, match="telegram:2"):
        await access.set_role("Sam", Role.BLOCKED, by=owner)
    assert parse_role(" Admin ") is Role.ADMIN
    with pytest.raises(AccessError, match="owner, admin, user, blocked"):
        parse_role("boss")
    assert issubclass(AccessError, MemgateError)


async def test_known_identity_lookup_is_cached_and_survives_restart(astore, clock, monkeypatch):
    access = make(astore, clock, dm_policy="open")
    first = await access.check(dm("1", name="A"))
    reads = []
    real = astore.aread

    async def counting(fn):
        reads.append(fn)
        return await real(fn)

    monkeypatch.setattr(astore, "aread", counting)
    for _ in range(5):
        assert await access.check(dm("1", name="A")) == first
    assert reads == []
    restarted = make(astore, clock, dm_policy="pairing")
    assert await restarted.check(dm("1", name="A")) == first and len(reads) == 1


# --- linking ------------------------------------------------------------------------------------
async def test_link_shares_one_space_and_moves_memories(astore, clock):
    access = make(astore, clock, dm_policy="open")
    tg = (await access.check(dm("1", name="Ann"))).identity
    wx = (await access.check(dm("wx1", channel="wechat", name="Ann"))).identity
    old = wx.space_id
    now = clock.now()
    rows = [NewMemory(space_id=old, kind="fact", text=f"fact {i}", title=f"fact {i}", created_at=now) for i in range(3)]
    insert_memories(astore._con, rows, np.full((3, 384), 0.05, dtype=np.float32))

    def seed(con):
        con.execute("INSERT INTO tasks (id, space_id, started_at, last_at) VALUES ('t_1', ?, ?, ?)", [old, now, now])
        con.execute("INSERT INTO ingest_queue (id, space_id, turn_id, payload, next_attempt_at, created_at) "
                    "VALUES ('q_1', ?, 'turn1', '{}', ?, ?)", [old, now, now])
    astore.write(seed)

    code = await access.link_code(tg)
    with pytest.raises(AccessError, match="yours"):
        await access.redeem_link(code, tg)
    joined = await access.redeem_link(code, wx)
    assert joined.space_id == tg.space_id and joined.key == wx.key

    ok = await access.check(dm("wx1", channel="wechat", name="Ann"))
    assert ok.space_ids == (tg.space_id, "public") and ok.write_space == tg.space_id
    counts = astore.read(lambda c: c.execute(
        "SELECT (SELECT count(*) FROM memories WHERE space_id = $o) + (SELECT count(*) FROM tasks WHERE space_id = $o)"
        " + (SELECT count(*) FROM ingest_queue WHERE space_id = $o),"
        " (SELECT count(*) FROM memories WHERE space_id = $n), (SELECT count(*) FROM tasks WHERE space_id = $n)",
        {"o": old, "n": tg.space_id}).fetchone())
    assert counts == (0, 3, 1)
    with pytest.raises(AccessError):
        await access.redeem_link(code, wx)                               # one-time


async def test_link_code_expires_and_needs_a_known_identity(astore, clock):
    access = make(astore, clock, dm_policy="open", group_policy="open")
    a = (await access.check(dm("1"))).identity
    b = (await access.check(dm("2"))).identity
    code = await access.link_code(a)
    clock.advance(minutes=11)
    with pytest.raises(AccessError, match="expired"):
        await access.redeem_link(code, b)
    stranger = (await access.check(group("-5", "77"))).identity           # unknown group member
    with pytest.raises(AccessError):
        await access.link_code(stranger)
    fresh = await access.link_code(a)
    with pytest.raises(AccessError):
        await access.redeem_link(fresh, stranger)
    newer = await access.link_code(a)
    with pytest.raises(AccessError):
        await access.redeem_link(fresh, b)                                # replaced by the newer code
    assert (await access.redeem_link(newer, b)).space_id == a.space_id


# --- isolation property -------------------------------------------------------------------------
_people = st.lists(
    st.tuples(st.sampled_from(["telegram", "wechat"]), st.text("abc123", min_size=1, max_size=3), st.booleans()),
    min_size=2, max_size=6, unique_by=lambda p: (p[0], p[1]))
_group_msgs = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(people=_people, group_msgs=_group_msgs)
def test_no_one_reaches_another_persons_private_space(people, group_msgs):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "iso.duckdb", 384, extra_migrations=ACCESS_MIGRATIONS)
        try:
            asyncio.run(_isolation(store, people, group_msgs))
        finally:
            store.close()


async def _isolation(store: Store, people, group_msgs) -> None:
    clock = FakeClock()
    allow = tuple(f"{ch}:{pid}" for ch, pid, by_allow in people if by_allow)
    access = make(store, clock, allow=allow, max_pending=10, group_policy="open")
    private: dict[str, str] = {}
    for ch, pid, by_allow in people:
        msg = dm(pid, channel=ch)
        if not by_allow:
            await let_in(access, msg)
        ok = await access.check(msg)
        assert isinstance(ok, Allowed)
        private[ok.identity.key] = ok.write_space
    assert len(set(private.values())) == len(private)                   # one private space each
    for ch, pid, _ in people:
        ok = await access.check(dm(pid, channel=ch))
        others = {s for k, s in private.items() if k != f"{ch}:{pid}"}
        assert not set(ok.space_ids) & others and ok.write_space == private[f"{ch}:{pid}"]
    for g, who in group_msgs:
        ch, pid, _ = people[who % len(people)]
        ok = await access.check(group(str(-g - 1), pid, channel=ch))
        assert isinstance(ok, Allowed)
        assert not set(ok.space_ids) & set(private.values())            # groups never see private spaces
