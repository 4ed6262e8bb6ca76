"""The media reader as the configuration describes it (`[speech]`, `[media]`)."""

from __future__ import annotations

from bot.media.reader import MB, MediaReader, MediaSettings
from bot.media.sandbox import PdfReaderLimits, SandboxedPdf
from bot.media.speech import LiteLLMTranscriber, SpeechSettings
from bot.settings import Settings

__all__ = ["media_reader"]


def media_reader(settings: Settings, reply_model: str) -> MediaReader:
    """`reply_model` is the reply LLM's litellm name (its vision is looked up when `vision = "auto"`)."""
    sp, m = settings.speech, settings.media
    transcriber = None
    if sp.model:
        model = sp.model if "/" in sp.model or not sp.api_base else f"openai/{sp.model}"  # as [llm] does
        transcriber = LiteLLMTranscriber(SpeechSettings(model=model, api_base=sp.api_base or None,
                                                        api_key=settings.secret("speech_api_key"),
                                                        language=sp.language, timeout=sp.timeout))
    return MediaReader(MediaSettings(
        vision=m.vision, vision_model=reply_model,
        max_image_bytes=int(m.max_image_mb * MB), max_file_bytes=int(m.max_file_mb * MB),
        max_audio_bytes=int(sp.max_mb * MB), max_audio_seconds=sp.max_seconds, fetch_timeout=m.fetch_timeout,
        max_document_chars=m.max_document_chars, max_pdf_pages=m.max_pdf_pages,
        keep_audio_dir=settings.data_path / "media" / "voice" if sp.keep_audio else None), transcriber,
        SandboxedPdf(PdfReaderLimits(timeout=m.read_timeout, memory_mb=m.read_memory_mb, max_children=m.max_readers)))
