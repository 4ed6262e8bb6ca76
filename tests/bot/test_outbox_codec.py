"""A queued reply survives the outbox's JSON with its attachments (the /pulse chart is bytes)."""

from hypothesis import given, strategies as st

from bot.message import Document, Image, Reply
from bot.outbox import reply_from_json, reply_to_json


@given(text=st.text(), blob=st.binary(max_size=256), which=st.sampled_from(["none", "image", "document"]))
def test_a_reply_round_trips_through_the_outbox_json(text, blob, which):
    extra = {"image": {"image": Image(filename="pulse.png", data=blob, caption=text)},
             "document": {"document": Document(filename="export.jsonl", data=blob)},
             "none": {}}[which]
    reply = Reply(channel="telegram", chat_id="42", text=text, **extra)
    assert reply_from_json(reply_to_json(reply)) == reply
