"""DM pairing: codes, the pending list, approve and deny, over a real DuckDB file."""

from __future__ import annotations

import pytest

from bot.access import ACCESS_MIGRATIONS, AccessError, Allowed, Refused, Role
from bot.pairing import DENIED_TEXT, TOO_MANY_PENDING_TEXT
from memory.store.connection import Store
from tests.fakes.people import code_of, dm, let_in, make


@pytest.fixture
def astore(tmp_path):
    s = Store(tmp_path / "access.duckdb", 384, extra_migrations=ACCESS_MIGRATIONS)
    yield s
    s.close()


async def test_pairing_end_to_end_first_approval_becomes_owner(astore, clock):
    access = make(astore, clock)
    first = await access.access.check(dm("100", name="Ann"))
    code = code_of(first)
    assert f"/approve {code}" in first.reply and f"memgate pairing approve {code}" in first.reply
    [req] = await access.pairing.pending()
    assert (req.key, req.code, req.display_name, req.chat_id) == ("telegram:100", code, "Ann", "100")

    owner = await access.pairing.approve(code.lower(), None)          # typed in lower case: still the code
    assert owner.role is Role.OWNER and owner.space_id.startswith("u_") and owner.key == "telegram:100"
    assert await access.pairing.pending() == []
    ok = await access.access.check(dm("100", name="Ann"))
    assert isinstance(ok, Allowed)
    assert ok.space_ids == (owner.space_id, "public") and ok.write_space == owner.space_id
    kinds = dict(astore.read(lambda c: c.execute("SELECT id, kind FROM spaces").fetchall()))
    assert kinds[owner.space_id] == "user" and kinds["public"] == "public"

    # The second approval (by the owner) makes a plain user with a space of their own.
    bob = await let_in(access, dm("200", name="Bob"), by=owner)
    assert bob.role is Role.USER and bob.space_id not in (owner.space_id, "public")
    assert access.access.is_admin(owner) and not access.access.is_admin(bob)
    with pytest.raises(AccessError):
        await access.pairing.approve("ABCDEFGH", by=None)          # unknown code


async def test_configured_owner_needs_no_pairing_and_first_approval_is_a_user(astore, clock):
    access = make(astore, clock, owners=("telegram:1",))
    ok = await access.access.check(dm("1"))
    assert isinstance(ok, Allowed) and ok.identity.role is Role.OWNER
    stranger = await let_in(access, dm("2"), by=ok.identity)
    assert stranger.role is Role.USER


async def test_expired_code_cannot_be_approved(astore, clock):
    access = make(astore, clock, pairing_ttl_minutes=60)
    code = code_of(await access.access.check(dm("7")))
    clock.advance(minutes=61)
    assert await access.pairing.pending() == []
    with pytest.raises(AccessError, match="expired"):
        await access.pairing.approve(code, None)
    assert await access.access.identity("telegram", "7") is None
    assert isinstance(await access.access.check(dm("7")), Refused)
    again = code_of(await access.access.check(dm("7")))          # they can ask for a fresh code
    assert again != code and (await access.pairing.approve(again, None)).key == "telegram:7"


async def test_fourth_pending_stranger_is_refused(astore, clock):
    access = make(astore, clock, max_pending=3)
    codes = [code_of(await access.access.check(dm(str(i)))) for i in range(3)]
    fourth = await access.access.check(dm("99"))
    assert fourth == Refused(TOO_MANY_PENDING_TEXT)
    assert len(await access.pairing.pending()) == 3
    await access.pairing.approve(codes[0], None)                    # a slot frees up
    assert code_of(await access.access.check(dm("99")))


async def test_same_stranger_gets_the_same_code(astore, clock):
    access = make(astore, clock)
    one = code_of(await access.access.check(dm("5")))
    clock.advance(minutes=30)
    two = await access.access.check(dm("5"))
    assert code_of(two) == one and "30 more minutes" in two.reply
    assert len(await access.pairing.pending()) == 1


async def test_denied_stranger_hears_so_and_code_is_dead(astore, clock):
    access = make(astore, clock)
    code = code_of(await access.access.check(dm("5")))
    await access.pairing.deny(code, None)
    assert await access.pairing.pending() == []
    assert await access.access.check(dm("5")) == Refused(DENIED_TEXT)
    with pytest.raises(AccessError, match="denied"):
        await access.pairing.approve(code, None)


async def test_only_admins_approve(astore, clock):
    access = make(astore, clock, dm_policy="open")
    user = (await access.access.check(dm("1"))).identity
    strangers = make(astore, clock)
    code = code_of(await strangers.access.check(dm("2")))
    with pytest.raises(AccessError):
        await strangers.pairing.approve(code, by=user)
    with pytest.raises(AccessError):
        await strangers.pairing.deny(code, by=user)
    assert len(await strangers.pairing.pending()) == 1
