"""Identity linking over a real DuckDB file: only in DMs, confirmed by both accounts (each shown
the other by platform and id, never by display name, with the direction in words), single-use,
expiring, limited in attempts, and the redeemer's memories stay their own."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bot.access.identities import AccessError
from bot.access.policy import Allowed
from bot.access.schema import ACCESS_MIGRATIONS
from bot.app import build_app
from bot.config import load_settings
from bot.access.linking import DM_ONLY_TEXT, LINKING_MIGRATIONS, LOCKED_TEXT
from memory.store.connection import Store
from memory.store.rows import NewMemory, insert_memories
from tests.fakes.channel import RecordingChannel
from tests.fakes.people import dm, group, make

CODE = re.compile(r"link code: ([A-Z0-9]{8})")


@pytest.fixture
def astore(tmp_path):
    s = Store(tmp_path / "access.duckdb", 384, extra_migrations=(*ACCESS_MIGRATIONS, *LINKING_MIGRATIONS))
    yield s
    s.close()


def seed_facts(store: Store, space: str, clock, *texts: str) -> None:
    rows = [NewMemory(space_id=space, kind="fact", text=t, title=t, created_at=clock.now()) for t in texts]
    insert_memories(store._con, rows, np.full((len(rows), 384), 0.05, dtype=np.float32))


def count_in(store: Store, space: str) -> int:
    return store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE space_id = ?", [space]).fetchone()[0])


async def two_people(doors):
    a = (await doors.access.check(dm("1", name="Ann"))).identity
    b = (await doors.access.check(dm("wx1", channel="wechat", name="Ann W"))).identity
    return a, b


async def test_link_in_a_group_posts_no_code(astore, clock):
    # Found: /link typed in a group posted the code in the group, for anyone to redeem.
    doors = make(astore, clock, dm_policy="open", group_policy="open")
    a, b = await two_people(doors)
    with pytest.raises(AccessError, match="direct message"):
        await doors.linking.offer(a, group("-5", "1"))
    offer = await doors.linking.offer(a, dm("1"))
    with pytest.raises(AccessError, match="direct message"):
        await doors.linking.claim(offer.code, b, group("-5", "wx1", channel="wechat"))


async def test_both_accounts_confirm_each_in_its_own_dm(astore, clock):
    # Found: redeeming a code joined the issuer's space at once, with no confirmation; then (issue
    # 22, B4) the issuer's yes alone joined a claimant who had been talked into pasting a code.
    doors = make(astore, clock, dm_policy="open")
    a, b = await two_people(doors)
    seed_facts(astore, a.space_id, clock, "bank PIN hint: my first dog")
    seed_facts(astore, b.space_id, clock, "wechat-only fact one", "wechat-only fact two")
    offer = await doors.linking.offer(a, dm("1"))
    assert offer.minutes == 10
    with pytest.raises(AccessError, match="yours"):
        await doors.linking.claim(offer.code, a, dm("1"))
    claim = await doors.linking.claim(offer.code, b, dm("wx1", channel="wechat"))
    # The issuer is asked in their own DM, and shown which account asks.
    assert (claim.issuer.key, claim.issuer_chat_id) == ("telegram:1", "1")
    assert (claim.claimant.channel, claim.claimant.display_name, claim.claimant.external_id) == ("wechat", "Ann W", "wx1")
    assert claim.claimant_chat_id == "wx1"
    # Nothing is shared before both confirmations, in either order.
    waiting = await doors.access.check(dm("wx1", channel="wechat"))
    assert a.space_id not in waiting.space_ids
    with pytest.raises(AccessError, match="direct message"):
        await doors.linking.decide(a, group("-5", "1"), yes=True)
    first = await doors.linking.decide(b, dm("wx1", channel="wechat"), yes=True)
    assert (first.outcome, first.side, first.other[0].key, first.other[1]) == ("waiting", "claimant", "telegram:1", "1")
    again = await doors.linking.decide(b, dm("wx1", channel="wechat"), yes=True)   # a second yes is no link
    assert again.outcome == "waiting"
    assert (await doors.access.check(dm("wx1", channel="wechat"))).write_space == b.space_id

    decided = await doors.linking.decide(a, dm("1"), yes=True)
    assert decided.linked and decided.claimant.key == "wechat:wx1" and decided.claimant_chat_id == "wx1"
    joined = await doors.access.check(dm("wx1", channel="wechat"))
    assert isinstance(joined, Allowed) and joined.write_space == a.space_id
    # The redeemer's own memories did not move: they stay in their old space, which only they read.
    assert count_in(astore, b.space_id) == 2 and count_in(astore, a.space_id) == 1
    assert joined.space_ids == (a.space_id, b.space_id, "public") and joined.own_spaces == (a.space_id, b.space_id)
    issuer = await doors.access.check(dm("1"))
    assert issuer.space_ids == (a.space_id, "public") and b.space_id not in issuer.own_spaces


async def test_the_issuer_can_refuse_and_the_code_is_spent(astore, clock):
    doors = make(astore, clock, dm_policy="open")
    a, b = await two_people(doors)
    mallory = (await doors.access.check(dm("666", name="Mallory"))).identity
    offer = await doors.linking.offer(a, dm("1"))
    await doors.linking.claim(offer.code, mallory, dm("666"))
    with pytest.raises(AccessError, match="no open link code"):
        await doors.linking.claim(offer.code, b, dm("wx1", channel="wechat"))  # single use: claimed already
    decided = await doors.linking.decide(a, dm("1"), yes=False)
    assert not decided.linked and decided.claimant.key == "telegram:666"
    assert (await doors.access.check(dm("666"))).write_space == mallory.space_id
    with pytest.raises(AccessError, match="no open link code"):
        await doors.linking.claim(offer.code, mallory, dm("666"))
    with pytest.raises(AccessError, match="waiting"):
        await doors.linking.decide(a, dm("1"), yes=True)


async def test_codes_expire_and_a_new_code_replaces_the_old(astore, clock):
    doors = make(astore, clock, dm_policy="open", link_code_minutes=5)
    a, b = await two_people(doors)
    offer = await doors.linking.offer(a, dm("1"))
    assert offer.minutes == 5
    clock.advance(minutes=6)
    with pytest.raises(AccessError, match="expired"):
        await doors.linking.claim(offer.code, b, dm("wx1", channel="wechat"))
    old = await doors.linking.offer(a, dm("1"))
    new = await doors.linking.offer(a, dm("1"))
    with pytest.raises(AccessError, match="no open link code"):
        await doors.linking.claim(old.code, b, dm("wx1", channel="wechat"))
    await doors.linking.claim(new.code, b, dm("wx1", channel="wechat"))
    clock.advance(minutes=6)                                   # a claim left unconfirmed expires too
    with pytest.raises(AccessError, match="waiting"):
        await doors.linking.decide(a, dm("1"), yes=True)
    assert (await doors.access.check(dm("wx1", channel="wechat"))).write_space == b.space_id


async def test_wrong_codes_lock_the_account_out_for_an_hour(astore, clock):
    doors = make(astore, clock, dm_policy="open", link_attempts_per_hour=5)
    a, b = await two_people(doors)
    offer = await doors.linking.offer(a, dm("1"))
    for guess in ("AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE"):
        with pytest.raises(AccessError, match="no open link code"):
            await doors.linking.claim(guess, b, dm("wx1", channel="wechat"))
    with pytest.raises(AccessError) as locked:
        await doors.linking.claim(offer.code, b, dm("wx1", channel="wechat"))   # even the right code
    assert str(locked.value) == LOCKED_TEXT.format(n=5, minutes=60)
    clock.advance(minutes=61)
    # The code itself expired meanwhile; a fresh one works once the hour has passed.
    fresh = await doors.linking.offer(a, dm("1"))
    claim = await doors.linking.claim(fresh.code, b, dm("wx1", channel="wechat"))
    assert claim.issuer.key == "telegram:1"


async def test_linking_needs_a_known_identity(astore, clock):
    doors = make(astore, clock, dm_policy="open", group_policy="open")
    a = (await doors.access.check(dm("1"))).identity
    stranger = (await doors.access.check(group("-5", "77"))).identity           # unknown group member
    with pytest.raises(AccessError):
        await doors.linking.offer(stranger, dm("77"))
    offer = await doors.linking.offer(a, dm("1"))
    with pytest.raises(AccessError):
        await doors.linking.claim(offer.code, stranger, dm("77"))


async def test_a_linked_person_keeps_their_old_space_across_restarts_and_links_of_links(astore, clock):
    doors = make(astore, clock, dm_policy="open")
    a, b = await two_people(doors)
    c = (await doors.access.check(dm("c1", channel="console", name="me"))).identity
    await doors.linking.claim((await doors.linking.offer(a, dm("1"))).code, b, dm("wx1", channel="wechat"))
    await doors.linking.decide(a, dm("1"), yes=True)
    await doors.linking.decide(b, dm("wx1", channel="wechat"), yes=True)
    # The console joins too, confirmed by the WeChat account (now in Ann's space) and by itself.
    await doors.linking.claim((await doors.linking.offer(b, dm("wx1", channel="wechat"))).code, c, dm("c1", channel="console"))
    await doors.linking.decide(c, dm("c1", channel="console"), yes=True)
    await doors.linking.decide(b, dm("wx1", channel="wechat"), yes=True)
    restarted = make(astore, clock, dm_policy="open")
    wx = await restarted.access.check(dm("wx1", channel="wechat"))
    me = await restarted.access.check(dm("c1", channel="console"))
    assert wx.write_space == me.write_space == a.space_id
    assert wx.own_spaces == (a.space_id, b.space_id) and me.own_spaces == (a.space_id, c.space_id)


async def test_in_chat_a_group_gets_no_code_and_the_issuer_sees_who_asks(tmp_path, clock, embedder):
    empty = tmp_path / "memgate.toml"
    empty.write_text("")
    settings = load_settings(None, env={"MEMGATE_CONFIG": str(empty), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
                                        "MEMGATE_ACCESS_DM_POLICY": "open", "MEMGATE_ACCESS_GROUP_POLICY": "open"})
    tg, wx = RecordingChannel("telegram"), RecordingChannel("wechat")
    async with build_app(settings, channels=[tg, wx], clock=clock.now, embedder=embedder) as app:
        async def say(ch: RecordingChannel, user: str, text: str, **kw) -> str:
            n = len(ch.sent)
            await ch.say(user, text, **kw)
            await ch.wait_for(n + 1, timeout=180)
            return ch.sent[n].text

        await say(tg, "ann", "/remember bank PIN hint: my first dog")
        in_group = await say(tg, "ann", "/link", chat="-100", is_group=True, mentions_bot=True)
        assert in_group == DM_ONLY_TEXT and not CODE.search(in_group)
        code = CODE.search(await say(tg, "ann", "/link")).group(1)
        told_claimant = await say(wx, "wx_ann", f"/link {code}")
        assert "made by the telegram account ann" in told_claimant and "/link yes" in told_claimant
        assert "your new messages here will be kept in the memory of the telegram account ann" in told_claimant
        await app.gateway.idle()
        asked = tg.texts("ann")[-1]
        assert "the wechat account wx_ann" in asked and "/link yes" in asked      # platform and id
        assert "PIN" not in await say(wx, "wx_ann", "/memory")                   # nothing shared yet
        assert "Nothing is shared until the wechat account wx_ann confirms" in await say(tg, "ann", "/link yes")
        await app.gateway.idle()
        assert wx.texts("wx_ann")[-1].startswith("The link was confirmed by the telegram account ann")
        assert "PIN" not in await say(wx, "wx_ann", "/memory")                   # one yes is not enough
        done = await say(wx, "wx_ann", "/link yes")
        assert done.startswith("Linked: your new messages here are now kept in the memory of the telegram account ann")
        await app.gateway.idle()
        assert tg.texts("ann")[-1].startswith("Linked: the wechat account wx_ann now shares your memory")
        assert "PIN" in await say(wx, "wx_ann", "/memory")


async def test_a_code_run_backwards_files_nothing_in_the_attackers_memory(tmp_path, clock, embedder):
    """Issue 22, B4: the attacker sends /link and talks the victim into pasting the code. The
    victim is shown whose memory their words would go to (platform and id, not the attacker's
    display name dressed up as the victim's phone), and the attacker's yes alone links nothing."""
    empty = tmp_path / "memgate.toml"
    empty.write_text("")
    settings = load_settings(None, env={"MEMGATE_CONFIG": str(empty), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
                                        "MEMGATE_ACCESS_DM_POLICY": "open"})
    tg, wx = RecordingChannel("telegram"), RecordingChannel("wechat")
    disguise = "Ann's iPhone (WeChat)"
    async with build_app(settings, channels=[tg, wx], clock=clock.now, embedder=embedder) as app:
        async def say(ch: RecordingChannel, user: str, text: str, name: str | None = None) -> str:
            n = len(ch.sent)
            await ch.say(user, text, name=name)
            await ch.wait_for(n + 1, timeout=180)
            return ch.sent[n].text

        code = CODE.search(await say(tg, "666", "/link", name=disguise)).group(1)
        shown = await say(wx, "wx_ann", f"/link {code}")
        assert "made by the telegram account 666" in shown
        assert "your new messages here will be kept in the memory of the telegram account 666" in shown
        await app.gateway.idle()
        assert "Only if the wechat account wx_ann is your own account" in tg.texts("666")[-1]
        await say(tg, "666", "/link yes", name=disguise)               # the attacker confirms ...
        victim = await app.access.check(dm("wx_ann", channel="wechat"))
        attacker = await app.access.check(dm("666"))
        assert victim.write_space != attacker.write_space              # ... and nothing is linked
        assert (await say(wx, "wx_ann", "/link no")).startswith("Refused")
        await app.gateway.idle()
        assert tg.texts("666")[-1] == "The link was refused by the wechat account wx_ann; nothing is shared."
        await say(wx, "wx_ann", "/remember my new PIN is 2468")
        assert "2468" not in "".join(r.text for r in await app.engine.list([attacker.write_space], limit=50))
        every = [r.text for r in tg.sent + wx.sent]
        assert not any(disguise in t for t in every)                  # the display name is never shown
