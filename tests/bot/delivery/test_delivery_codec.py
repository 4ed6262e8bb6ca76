"""What the inbox and outbox store survives their JSON: a queued reply with its attachments (the
/pulse chart is bytes), an accepted message with what came with it (a photo's file id), so a
message pending at a crash is answered after the restart. Found: a pending photo message came
back with its media as plain dicts and failed on every restart, so it was never answered."""

from datetime import UTC, datetime, timedelta
from dataclasses import replace

from hypothesis import given, strategies as st

from bot.delivery.inbox import message_from_json, message_to_json
from bot.message import Document, Image, Kind, Media, Message, Reply
from bot.delivery.outbox import reply_from_json, reply_to_json
from memory.redaction import redact


@given(text=st.text(), blob=st.binary(max_size=256), which=st.sampled_from(["none", "image", "document"]))
def test_a_reply_round_trips_through_the_outbox_json(text, blob, which):
    extra = {"image": {"image": Image(filename="pulse.png", data=blob, caption=text)},
             "document": {"document": Document(filename="export.jsonl", data=blob)},
             "none": {}}[which]
    reply = Reply(channel="telegram", chat_id="42", text=text, **extra)
    assert reply_from_json(reply_to_json(reply)) == reply


MEDIA = st.builds(Media, kind=st.sampled_from([Kind.PHOTO, Kind.VOICE, Kind.FILE, Kind.VIDEO, Kind.STICKER]),
                  ref=st.text(max_size=30), mime=st.text(max_size=12), name=st.text(max_size=20),
                  size=st.none() | st.integers(0, 2**40), duration=st.none() | st.floats(0, 1e5),
                  transcript=st.text(max_size=40))


@given(text=st.text(), name=st.text(max_size=20), media=st.lists(MEDIA, max_size=3).map(tuple),
       kind=st.sampled_from(list(Kind)), group=st.booleans(), minutes=st.integers(0, 10**6),
       ids=st.tuples(st.none() | st.text(max_size=12), st.none() | st.text(max_size=12)))
def test_an_accepted_message_round_trips_through_the_inbox_json(text, name, media, kind, group, minutes, ids):
    msg = Message(channel="telegram", chat_id="-100", sender_id="7", text=text, sender_name=name, media=media,
                  kind=kind, is_group=group, timestamp=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes),
                  message_id=ids[0], thread_id=ids[1])
    back = message_from_json(message_to_json(msg))
    # Stored redacted (the text, and WeChat's transcript of a voice note), everything else as it came.
    stored = replace(msg, text=redact(text), media=tuple(replace(m, transcript=redact(m.transcript)) for m in media))
    assert back == stored
    assert back.text_for_agent == stored.text_for_agent


def test_a_voice_notes_transcript_is_not_at_rest_with_its_secret():
    said = "my api key is sk-abcdefghijklmnopqrstuvwx1234 ok"
    msg = Message(channel="wechat", chat_id="u", sender_id="u", text=said, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
                  kind=Kind.VOICE, media=(Media(Kind.VOICE, "", transcript=said),))
    stored = message_to_json(msg)
    assert "sk-abcdefghijklmnopqrstuvwx1234" not in stored and "[REDACTED_KEY]" in stored
