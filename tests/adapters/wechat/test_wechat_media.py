"""Voice notes, photos and files on WeChat (issue 25), end to end on loopback: iLink items with
WeChat's own voice transcript, an image and a PDF fetched from the fake CDN (AES-128-ECB as
WeChat serves them); Official Account pushes with `Recognition` and a `PicUrl`. The real
gateway, agent and DuckDB memory; the fake OpenAI-compatible server checks the vision request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.wechat.ilink.adapter import WechatIlinkAdapter
from bot.app import build_app
from tests.adapters.wechat.test_wechat_e2e import (  # noqa: F401 - fixtures
    ALICE, MP_ALICE, clean, data_dir, ilink, mp_api, mp_app, reply_requests, said, settings_for,
)
from tests.fakes import brain
from tests.fakes.files import tiny_pdf, tiny_png
from tests.fakes.llm_server import fake_audio

VISION = {"MEMGATE_MEDIA_VISION": "on"}


def sees(description: str, answer: str):
    """The brain, but a request with a picture is answered with its description line first."""
    def respond(req: dict) -> Any:
        if isinstance(req["messages"][-1].get("content"), list):
            return f"[photo: {description}]\n{answer}"
        return brain.respond(req)
    return respond


def chunk_rows(app) -> list[tuple[str, str]]:
    return app.store.read(lambda c: c.execute(
        "SELECT title, text FROM memories WHERE kind = 'chunk' AND status = 'active' AND role = 'user' "
        "ORDER BY created_at, title").fetchall())


async def test_ilink_voice_image_and_pdf_are_answered_and_remembered(ilink, settings_for, data_dir: Path, fake_llm,
                                                                     clock, embedder) -> None:
    ilink.write_credentials(data_dir)
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat:{ALICE}", **VISION)
    fake_llm.responder = sees("a bowl of ramen with a soft egg", "Looks delicious!")
    adapter = WechatIlinkAdapter(data_dir, backoff_base=0.01, credentials_check_interval=0.05, typing_interval=3600,
                                 cdn_base_url=ilink.cdn_base_url)
    pdf = tiny_pdf([["Noodle Bar menu", "Tonkotsu ramen 14 EUR", "Gyoza 6 EUR"]])
    app = build_app(settings, channels=[adapter], clock=clock.now, embedder=embedder)
    async with app:
        ilink.inject_voice(ALICE, "remind me to water the plants")
        await ilink.wait_for_sent(1, timeout=30)
        ilink.inject_image(ALICE, tiny_png(), text="my dinner")
        await ilink.wait_for_sent(2, timeout=30)
        ilink.inject_file(ALICE, "menu.pdf", data=pdf)
        await ilink.wait_for_sent(3, timeout=30)
        await app.gateway.idle()
        await app.engine.worker.drain()
        rows = chunk_rows(app)
    voice, photo, document = ilink.texts_to(ALICE)
    assert said(voice) == "[voice] remind me to water the plants"  # WeChat's transcript, no speech call
    assert fake_llm.transcription_requests == []
    assert photo == "Looks delicious!"
    image_request = reply_requests(fake_llm)[1]["messages"][-1]["content"]
    assert image_request[0] == {"type": "text", "text": "[photo] my dinner"}
    assert image_request[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert said(document).startswith("[file: menu.pdf]")
    assert len(ilink.cdn_downloads) == 2  # the image and the PDF, decrypted on our side
    assert ("menu.pdf", "Noodle Bar menu\nTonkotsu ramen 14 EUR\nGyoza 6 EUR") in rows
    assert ("", "") not in rows
    texts = [t for _, t in rows]
    assert "[voice] remind me to water the plants" in texts
    assert "[photo: a bowl of ramen with a soft egg] my dinner" in texts
    clean(ilink)


async def test_mp_recognition_picurl_and_media_ids_are_answered(mp_api, settings_for, fake_llm, clock, embedder) -> None:
    settings = settings_for(MEMGATE_ACCESS_OWNERS=f"wechat_mp:{MP_ALICE}", MEMGATE_SPEECH_MODEL="whisper-1",
                            MEMGATE_SPEECH_API_BASE=fake_llm.base_url, **VISION)
    fake_llm.responder = sees("a red lantern over a door", "Happy new year!")
    pic = mp_api.picture_url("lantern.jpg", tiny_png((200, 20, 20)))
    mp_api.media["v-amr"] = (fake_audio("我到家了"), "audio/amr")  # recognition off: fetched by MediaId
    async with mp_app(settings, mp_api, clock, embedder, passive_timeout=4.0) as (app, adapter, client):
        pushes = [await client.push(client.media_xml(MP_ALICE, "voice", extra)) for extra in (
            "<MediaId>m1</MediaId><Format>amr</Format><Recognition>明天提醒我买菜</Recognition>",
            "<MediaId>v-amr</MediaId><Format>amr</Format>")]
        pushes.append(await client.push(client.media_xml(MP_ALICE, "image", f"<PicUrl>{pic}</PicUrl><MediaId>m2</MediaId>")))
        await app.gateway.idle()
        await app.engine.worker.drain()
        rows = chunk_rows(app)
    # Passive replies, or through the customer-service API when the 4 s passive window passed.
    answers = [r.reply.content for r in pushes if r.reply is not None] + [m.content for m in mp_api.sent]
    assert sorted(said(a) for a in answers) == ["Happy new year!", "[voice] 我到家了", "[voice] 明天提醒我买菜"]
    assert mp_api.picture_fetches == ["lantern.jpg"] and mp_api.media_fetches == ["v-amr"]
    (stt,) = fake_llm.transcription_requests  # WeChat's own recognition needed none
    assert stt["file"]["filename"] == "voice.amr" and stt["file"]["content_type"] == "audio/amr"
    texts = [t for _, t in rows]
    assert "[voice] 明天提醒我买菜" in texts and "[photo: a red lantern over a door]" in texts
