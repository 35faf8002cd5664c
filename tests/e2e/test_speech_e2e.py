"""End to end: `gateway serve` on the shipped config transcribes beckett.wav through the
openai SDK (the issue's "done when"): its whisper model, on demand, under OpenAI's name."""

from __future__ import annotations

import httpx
from speech_clips import BECKETT, WORDS, words


def test_the_shipped_gateway_transcribes_beckett(gateway, openai_client):
    assert "whisper" in {m.id for m in openai_client.models.list()}
    with BECKETT.open("rb") as f:
        result = openai_client.audio.transcriptions.create(model="whisper-1", file=f)
    assert (
        words(result.text) == WORDS
    )  # "Ever tried, ever failed. No matter, try again. Fail again. …"
    attached = gateway.wait_event("model_attached", model="whisper", timeout=30)
    assert attached["detail"]["languages"] == "en"
    # A chat model under an audio route is refused by name, not sent to the fallback.
    refused = httpx.post(
        f"{gateway.url}/v1/audio/transcriptions",
        data={"model": "smollm2"},
        files={"file": ("b.wav", BECKETT.read_bytes())},
        timeout=120,
    )
    assert refused.status_code == 400 and "is a chat model" in refused.text
