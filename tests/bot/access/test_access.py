"""Access: DM and group policies, roles, identities and isolation over a real DuckDB file
(pairing is tested in test_pairing.py, linking in test_linking.py)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.access.codes import CODE_ALPHABET, new_code, normalize_code
from bot.access.identities import AccessError, Role, parse_role
from bot.access.policy import (
    ALLOWLIST_TEXT, DM_DISABLED_TEXT, GROUP_NOT_ALLOWED_TEXT, Allowed, Refused, group_space_id,
)
from bot.access.schema import ACCESS_MIGRATIONS
from bot.errors import MemgateError
from bot.access.linking import LINKING_MIGRATIONS
from memory.store.backend import open_store
from memory.store.connection import Store
from tests.fakes.clock import FakeClock
from tests.fakes.people import code_of, dm, group, let_in, make


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def astore(request, tmp_path):
    """The access suite runs on both backends: a DuckDB file, or a fresh PostgreSQL schema."""
    if request.param == "duckdb":
        s = Store(tmp_path / "access.duckdb", 384, extra_migrations=ACCESS_MIGRATIONS)
    else:
        s = open_store(request.getfixturevalue("pg_url"), 384, extra_migrations=ACCESS_MIGRATIONS)
    yield s
    s.close()


# --- pairing -----------------------------------------------------------------------------------


@settings(deadline=None)   # a pure function; a loaded machine must not fail it on time
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
    doors = make(astore, clock, dm_policy="allowlist", allow=("telegram:5",), owners=("telegram:1",))
    assert isinstance(await doors.access.check(dm("5")), Allowed)
    assert isinstance(await doors.access.check(dm("1")), Allowed)
    assert await doors.access.check(dm("6")) == Refused(ALLOWLIST_TEXT)
    assert await doors.pairing.pending() == [] and await doors.access.identity("telegram", "6") is None


async def test_allowlist_lets_admins_in_but_not_plain_users(astore, clock):
    opened = make(astore, clock, dm_policy="open", owners=("telegram:1",))
    owner = (await opened.access.check(dm("1"))).identity
    await opened.access.check(dm("2"))
    await opened.access.check(dm("3"))
    await opened.access.set_role("telegram:2", Role.ADMIN, by=owner)
    doors = make(astore, clock, dm_policy="allowlist", owners=("telegram:1",))
    assert isinstance(await doors.access.check(dm("2")), Allowed)
    assert await doors.access.check(dm("3")) == Refused(ALLOWLIST_TEXT)


async def test_open_policy_gives_everyone_a_private_space(astore, clock):
    doors = make(astore, clock, dm_policy="open")
    a, b = await doors.access.check(dm("1")), await doors.access.check(dm("1", channel="wechat"))
    assert isinstance(a, Allowed) and isinstance(b, Allowed)
    assert a.identity.role is Role.USER and a.write_space != b.write_space
    assert (await doors.access.check(dm("1"))).write_space == a.write_space


async def test_disabled_policy_refuses_all_but_owners(astore, clock):
    # A user let in under an earlier open policy is refused too once DMs are off.
    user = (await make(astore, clock, dm_policy="open").access.check(dm("3"))).identity
    doors = make(astore, clock, dm_policy="disabled", owners=("telegram:1",))
    assert await doors.access.check(dm("2")) == Refused(DM_DISABLED_TEXT)
    assert await doors.access.check(dm("3")) == Refused(DM_DISABLED_TEXT)
    assert isinstance(await doors.access.check(dm("1")), Allowed)
    assert await doors.pairing.pending() == [] and user.key == "telegram:3"


async def test_console_is_always_allowed_and_owner_without_configured_owner(astore, clock):
    doors = make(astore, clock, dm_policy="disabled")
    me = await doors.access.check(dm("alice", channel="console"))
    assert isinstance(me, Allowed) and me.identity.role is Role.OWNER
    # The console's implicit owner does not stop the first chat approval from becoming owner.
    pairing = make(astore, clock)
    assert (await let_in(pairing, dm("9"))).role is Role.OWNER
    other = make(astore, clock, dm_policy="disabled", owners=("telegram:9",))
    bob = await other.access.check(dm("bob", channel="console"))
    assert isinstance(bob, Allowed) and bob.identity.role is Role.USER


# --- groups -------------------------------------------------------------------------------------
async def test_group_not_addressed_is_silent(astore, clock):
    doors = make(astore, clock, groups=("telegram:-100",))
    assert await doors.access.check(group("-100", "5", mention=False)) == Refused(None)
    ok = await doors.access.check(group("-100", "5", mention=False, text="/help"))   # a command addresses the bot
    assert isinstance(ok, Allowed)


async def test_group_allowlist(astore, clock):
    doors = make(astore, clock, groups=("telegram:-100",))
    ok = await doors.access.check(group("-100", "5"))
    assert isinstance(ok, Allowed)
    gid = group_space_id("telegram", "-100")
    assert ok.space_ids == (gid, "public") and ok.write_space == gid
    assert astore.read(lambda c: c.execute("SELECT kind FROM spaces WHERE id = ?", [gid]).fetchone()) == ("group",)
    # The unknown member spoke in the group only: a DM still needs pairing.
    assert await doors.access.identity("telegram", "5") is None
    assert code_of(await doors.access.check(dm("5")))
    assert await doors.access.check(group("-200", "5")) == Refused(GROUP_NOT_ALLOWED_TEXT)
    assert await doors.access.check(group("-200", "5", mention=False)) == Refused(None)


async def test_group_open_disabled_and_no_mention(astore, clock):
    assert isinstance(await make(astore, clock, group_policy="open").access.check(group("-7", "1")), Allowed)
    off = make(astore, clock, group_policy="disabled", groups=("telegram:-7",))
    assert await off.access.check(group("-7", "1")) == Refused(None)
    chatty = make(astore, clock, group_policy="open", require_mention=False)
    assert isinstance(await chatty.access.check(group("-7", "1", mention=False)), Allowed)


async def test_known_member_in_group_gets_group_space_not_private(astore, clock):
    doors = make(astore, clock, dm_policy="open", groups=("telegram:-1",))
    mine = (await doors.access.check(dm("5"))).write_space
    ok = await doors.access.check(group("-1", "5"))
    assert isinstance(ok, Allowed) and mine not in ok.space_ids and ok.identity.key == "telegram:5"


async def test_blocked_user_is_silently_refused(astore, clock):
    doors = make(astore, clock, dm_policy="open", owners=("telegram:1",), groups=("telegram:-1",))
    owner = (await doors.access.check(dm("1"))).identity
    await doors.access.check(dm("2", name="Mallory"))
    blocked = await doors.access.set_role("Mallory", Role.BLOCKED, by=owner)
    assert blocked.role is Role.BLOCKED
    assert await doors.access.check(dm("2")) == Refused(None)
    assert await doors.access.check(group("-1", "2")) == Refused(None)
    assert isinstance(await doors.access.check(group("-1", "3")), Allowed)


def test_group_space_ids_are_readable_and_distinct():
    assert group_space_id("telegram", "-100123") == "g_telegram_-100123"
    odd = {group_space_id("wechat", "a@chatroom"), group_space_id("wechat", "a#chatroom"),
           group_space_id("wechat", "mp_1"), group_space_id("wechat_mp", "1"), group_space_id("wechat", "a_chatroom")}
    assert len(odd) == 5 and all(g.startswith("g_wechat") for g in odd)


# --- roles --------------------------------------------------------------------------------------
async def test_set_role_permissions(astore, clock):
    doors = make(astore, clock, dm_policy="open", owners=("telegram:1",))
    owner = (await doors.access.check(dm("1", name="Olive"))).identity
    adam = (await doors.access.check(dm("2", name="Adam"))).identity
    ursula = (await doors.access.check(dm("3", name="Ursula"))).identity
    await doors.access.check(dm("4", name="Vic"))

    with pytest.raises(AccessError):
        await doors.access.set_role("Vic", Role.BLOCKED, by=ursula)            # users cannot
    adam = await doors.access.set_role("@adam", Role.ADMIN, by=owner)         # owner makes admins
    assert doors.access.is_admin(adam) and adam.role is Role.ADMIN
    with pytest.raises(AccessError, match="only the owner"):
        await doors.access.set_role("Ursula", Role.ADMIN, by=adam)            # admins cannot
    with pytest.raises(AccessError, match="owner"):
        await doors.access.set_role("Olive", Role.BLOCKED, by=adam)           # nobody demotes the owner
    with pytest.raises(AccessError, match="owner"):
        await doors.access.set_role("telegram:1", Role.USER, by=owner)
    assert (await doors.access.set_role("telegram:4", Role.BLOCKED, by=adam)).role is Role.BLOCKED
    await doors.access.set_role("Ursula", Role.ADMIN, by=owner)
    with pytest.raises(AccessError):
        await doors.access.set_role("Ursula", Role.USER, by=adam)             # admins do not demote admins
    demoted = await doors.access.set_role("Adam", Role.USER, by=owner)
    assert not doors.access.is_admin(demoted) and not doors.access.is_admin(adam)   # stale identity: latest role wins
    with pytest.raises(AccessError, match="no user"):
        await doors.access.set_role("Nobody", Role.USER, by=owner)
    roles = {i.key: i.role for i in await doors.access.users()}
    assert roles == {"telegram:1": Role.OWNER, "telegram:2": Role.USER, "telegram:3": Role.ADMIN,
                     "telegram:4": Role.BLOCKED}


async def test_ambiguous_names_and_role_parsing(astore, clock):
    doors = make(astore, clock, dm_policy="open", owners=("telegram:1",))
    owner = (await doors.access.check(dm("1"))).identity
    await doors.access.check(dm("2", name="Sam"))
    await doors.access.check(dm("3", name="sam"))
    with pytest.raises(AccessError, match="telegram:2"):
        await doors.access.set_role("Sam", Role.BLOCKED, by=owner)
    assert parse_role(" Admin ") is Role.ADMIN
    with pytest.raises(AccessError, match="owner, admin, user, blocked"):
        parse_role("boss")
    assert issubclass(AccessError, MemgateError)


async def test_known_identity_lookup_is_cached_and_survives_restart(astore, clock, monkeypatch):
    doors = make(astore, clock, dm_policy="open")
    first = await doors.access.check(dm("1", name="A"))
    reads = []
    real = astore.aread

    async def counting(fn):
        reads.append(fn)
        return await real(fn)

    monkeypatch.setattr(astore, "aread", counting)
    for _ in range(5):
        assert await doors.access.check(dm("1", name="A")) == first
    assert reads == []
    restarted = make(astore, clock, dm_policy="pairing")
    assert await restarted.access.check(dm("1", name="A")) == first and len(reads) == 1


# --- isolation property -------------------------------------------------------------------------
_people = st.lists(
    st.tuples(st.sampled_from(["telegram", "wechat"]), st.text("abc123", min_size=1, max_size=3), st.booleans()),
    min_size=2, max_size=6, unique_by=lambda p: (p[0], p[1]))
_group_msgs = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), max_size=8)
_links = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.booleans(), st.booleans()), max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(people=_people, group_msgs=_group_msgs, links=_links)
def test_no_one_reaches_another_persons_private_space(people, group_msgs, links):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "iso.duckdb", 384, extra_migrations=(*ACCESS_MIGRATIONS, *LINKING_MIGRATIONS))
        try:
            asyncio.run(_isolation(store, people, group_msgs, links))
        finally:
            store.close()


async def _isolation(store: Store, people, group_msgs, links) -> None:
    clock = FakeClock()
    allow = tuple(f"{ch}:{pid}" for ch, pid, by_allow in people if by_allow)
    doors = make(store, clock, allow=allow, max_pending=10, group_policy="open", pairing_codes_per_hour=10)
    private: dict[str, str] = {}
    for ch, pid, by_allow in people:
        msg = dm(pid, channel=ch)
        if not by_allow:
            await let_in(doors, msg)
        ok = await doors.access.check(msg)
        assert isinstance(ok, Allowed)
        private[ok.identity.key] = ok.write_space
    assert len(set(private.values())) == len(private)                   # one private space each
    keys = [f"{ch}:{pid}" for ch, pid, _ in people]
    # The model: who writes where, and which spaces each keeps reading after joining another.
    main, kept = dict(private), {k: set() for k in keys}
    for a, b, claimed_in_group, yes in links:
        issuer, claimant = people[a % len(people)], people[b % len(people)]
        ik, ck = f"{issuer[0]}:{issuer[1]}", f"{claimant[0]}:{claimant[1]}"
        i_ident = (await doors.access.check(dm(issuer[1], channel=issuer[0]))).identity
        c_ident = (await doors.access.check(dm(claimant[1], channel=claimant[0]))).identity
        offer = await doors.linking.offer(i_ident, dm(issuer[1], channel=issuer[0]))
        where = group("-9", claimant[1], channel=claimant[0]) if claimed_in_group else dm(claimant[1], channel=claimant[0])
        try:
            await doors.linking.claim(offer.code, c_ident, where)
            await doors.linking.decide(i_ident, dm(issuer[1], channel=issuer[0]), yes=yes)
            if yes:  # both accounts confirm a link
                await doors.linking.decide(c_ident, where, yes=True)
        except AccessError:
            assert claimed_in_group or ik == ck or main[ik] == main[ck]
            continue
        assert not claimed_in_group
        if yes:
            old = main[ck]
            for k in keys:
                if main[k] == old:
                    kept[k].add(old)
                    main[k] = main[ik]
    for ch, pid, _ in people:
        key = f"{ch}:{pid}"
        ok = await doors.access.check(dm(pid, channel=ch))
        readable = {main[key], *kept[key], "public"}
        assert ok.write_space == main[key] and set(ok.space_ids) == readable
        assert set(ok.own_spaces) == readable - {"public"}
    for g, who in group_msgs:
        ch, pid, _ = people[who % len(people)]
        ok = await doors.access.check(group(str(-g - 1), pid, channel=ch))
        assert isinstance(ok, Allowed)
        assert not set(ok.space_ids) & set(private.values())            # groups never see private spaces


def test_a_database_from_before_the_split_upgrades_and_survives_a_kill(tmp_path):
    # The new tables come by new migration versions (no ALTER TABLE: DuckDB 1.5.5 cannot replay
    # some of those from the WAL), and a process killed right after migrating leaves a file that opens.
    import os
    import subprocess
    import sys

    from bot.access.linking import LINKING_MIGRATIONS

    path = tmp_path / "old.duckdb"
    old = Store(path, 384, extra_migrations=ACCESS_MIGRATIONS[:1])
    old.write(lambda c: c.execute("INSERT INTO identities VALUES ('telegram', '1', 'u_old', 'owner', 'Ann', now(), now())"))
    old.close()
    root = Path(__file__).resolve().parents[3]
    script = ("import os; from bot.access.schema import ACCESS_MIGRATIONS; from bot.access.linking import LINKING_MIGRATIONS; "
              "from memory.store.connection import Store; "
              f"Store({str(path)!r}, 384, extra_migrations=(*ACCESS_MIGRATIONS, *LINKING_MIGRATIONS)); os._exit(9)")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    store = Store(path, 384, extra_migrations=(*ACCESS_MIGRATIONS, *LINKING_MIGRATIONS))
    try:
        versions = {v for (v,) in store.read(lambda c: c.execute("SELECT version FROM schema_migrations").fetchall())}
        assert {200, 201, 220} <= versions
        ann = asyncio.run(make(store, FakeClock()).access.identity("telegram", "1"))
        assert (ann.space_id, ann.kept_spaces) == ("u_old", ())
    finally:
        store.close()
