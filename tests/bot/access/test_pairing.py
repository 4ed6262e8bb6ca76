"""DM pairing: codes, the pending list, approve and deny, over a real DuckDB file."""

from __future__ import annotations

import pytest

from bot.access.identities import AccessError, Role
from bot.access.policy import Allowed, Refused
from bot.access.schema import ACCESS_MIGRATIONS
from bot.app import build_app
from bot.config import load_settings
from bot.access.pairing import APPROVED_TEXT, CODES_PER_HOUR_TEXT, DENIED_TEXT
from memory.store.connection import Store
from tests.fakes.channel import RecordingChannel
from tests.fakes.people import code_of, dm, let_in, make


@pytest.fixture
def astore(tmp_path):
    s = Store(tmp_path / "access.duckdb", 384, extra_migrations=ACCESS_MIGRATIONS)
    yield s
    s.close()


async def test_pairing_end_to_end_first_approval_becomes_owner(astore, clock):
    doors = make(astore, clock)
    first = await doors.access.check(dm("100", name="Ann"))
    code = code_of(first)
    # What works while the gateway runs: the owner's /approve in chat, not the server's CLI
    # (the gateway holds the database, so `memgate pairing approve` could not open it).
    assert f"/approve {code}" in first.reply and "memgate pairing" not in first.reply
    [req] = await doors.pairing.pending()
    assert (req.key, req.code, req.display_name, req.chat_id) == ("telegram:100", code, "Ann", "100")

    owner = (await doors.pairing.approve(code.lower(), None)).identity         # typed in lower case: still the code
    assert owner.role is Role.OWNER and owner.space_id.startswith("u_") and owner.key == "telegram:100"
    assert await doors.pairing.pending() == []
    ok = await doors.access.check(dm("100", name="Ann"))
    assert isinstance(ok, Allowed)
    assert ok.space_ids == (owner.space_id, "public") and ok.write_space == owner.space_id
    kinds = dict(astore.read(lambda c: c.execute("SELECT id, kind FROM spaces").fetchall()))
    assert kinds[owner.space_id] == "user" and kinds["public"] == "public"

    # The second approval (by the owner) makes a plain user with a space of their own.
    bob = await let_in(doors, dm("200", name="Bob"), by=owner)
    assert bob.role is Role.USER and bob.space_id not in (owner.space_id, "public")
    assert doors.access.is_admin(owner) and not doors.access.is_admin(bob)
    with pytest.raises(AccessError):
        await doors.pairing.approve("ABCDEFGH", by=None)          # unknown code


async def test_configured_owner_needs_no_pairing_and_first_approval_is_a_user(astore, clock):
    doors = make(astore, clock, owners=("telegram:1",))
    ok = await doors.access.check(dm("1"))
    assert isinstance(ok, Allowed) and ok.identity.role is Role.OWNER
    stranger = await let_in(doors, dm("2"), by=ok.identity)
    assert stranger.role is Role.USER


async def test_expired_code_cannot_be_approved(astore, clock):
    doors = make(astore, clock, pairing_ttl_minutes=60)
    code = code_of(await doors.access.check(dm("7")))
    clock.advance(minutes=61)
    assert await doors.pairing.pending() == []
    with pytest.raises(AccessError, match="expired"):
        await doors.pairing.approve(code, None)
    assert await doors.access.identity("telegram", "7") is None
    assert isinstance(await doors.access.check(dm("7")), Refused)
    again = code_of(await doors.access.check(dm("7")))          # they can ask for a fresh code
    assert again != code and (await doors.pairing.approve(again, None)).identity.key == "telegram:7"


async def test_waiting_strangers_cannot_lock_a_newcomer_out(astore, clock):
    # Found: three strangers waiting locked every newcomer out for the whole pairing TTL.
    doors = make(astore, clock, max_pending=3)
    codes = []
    for i in range(3):
        codes.append(code_of(await doors.access.check(dm(str(i)))))
        clock.advance(seconds=1)
    newcomer = code_of(await doors.access.check(dm("99")))
    pending = await doors.pairing.pending()
    assert len(pending) == 3                                         # still bounded
    assert [p.code for p in pending] == [*codes[1:], newcomer]        # the oldest made room
    with pytest.raises(AccessError, match="expired"):
        await doors.pairing.approve(codes[0], None)
    assert (await doors.pairing.approve(newcomer, None)).identity.key == "telegram:99"
    # The one whose request expired asks again and gets a fresh code.
    again = code_of(await doors.access.check(dm("0")))
    assert again != codes[0] and again in [p.code for p in await doors.pairing.pending()]


async def test_one_stranger_cannot_churn_the_list_with_new_codes(astore, clock):
    # Per-sender limit: a stranger whose requests keep expiring gets a few codes an hour, no more.
    doors = make(astore, clock, max_pending=1, pairing_codes_per_hour=2)
    first = code_of(await doors.access.check(dm("1")))
    clock.advance(seconds=1)
    code_of(await doors.access.check(dm("2")))                       # 1's request makes room
    clock.advance(seconds=1)
    second = code_of(await doors.access.check(dm("1")))              # 1's second code of the hour
    clock.advance(seconds=1)
    code_of(await doors.access.check(dm("2")))
    clock.advance(seconds=1)
    refused = await doors.access.check(dm("1"))
    assert refused == Refused(CODES_PER_HOUR_TEXT.format(n=2, minutes=60))
    assert [p.key for p in await doors.pairing.pending()] == ["telegram:2"]   # the refusal evicted no one
    clock.advance(minutes=61)
    third = code_of(await doors.access.check(dm("1")))
    assert len({first, second, third}) == 3


async def test_same_stranger_gets_the_same_code(astore, clock):
    doors = make(astore, clock)
    one = code_of(await doors.access.check(dm("5")))
    clock.advance(minutes=30)
    two = await doors.access.check(dm("5"))
    assert code_of(two) == one and "30 more minutes" in two.reply
    assert len(await doors.pairing.pending()) == 1


async def test_denied_stranger_hears_so_and_code_is_dead(astore, clock):
    doors = make(astore, clock)
    code = code_of(await doors.access.check(dm("5")))
    await doors.pairing.deny(code, None)
    assert await doors.pairing.pending() == []
    assert await doors.access.check(dm("5")) == Refused(DENIED_TEXT)
    with pytest.raises(AccessError, match="denied"):
        await doors.pairing.approve(code, None)


async def test_only_admins_approve(astore, clock):
    doors = make(astore, clock, dm_policy="open")
    user = (await doors.access.check(dm("1"))).identity
    strangers = make(astore, clock)
    code = code_of(await strangers.access.check(dm("2")))
    with pytest.raises(AccessError):
        await strangers.pairing.approve(code, by=user)
    with pytest.raises(AccessError):
        await strangers.pairing.deny(code, by=user)
    assert len(await strangers.pairing.pending()) == 1


async def test_the_approved_person_is_told_they_were_let_in(tmp_path, clock, embedder):
    # Through the gateway's outbound path, to the chat the request came from.
    empty = tmp_path / "memgate.toml"
    empty.write_text("")
    settings = load_settings(None, env={"MEMGATE_CONFIG": str(empty), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
                                        "MEMGATE_ACCESS_OWNERS": "telegram:owner"})
    channel = RecordingChannel("telegram")
    async with build_app(settings, channels=[channel], clock=clock.now, embedder=embedder) as app:
        await channel.say("stranger", "hello?")
        [asked] = await channel.wait_for(1, timeout=180)
        code = code_of(Refused(asked.text))
        await channel.say("owner", f"/approve {code}")
        await channel.wait_for(3, timeout=180)
        await app.gateway.idle()
        told = [r for r in channel.sent if r.chat_id == "stranger"]
        assert [r.text for r in told] == [asked.text, APPROVED_TEXT]
        assert told[-1].recipient_id == "stranger"
        assert channel.texts("owner")[-1].startswith("Approved stranger (telegram:stranger)")
