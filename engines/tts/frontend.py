"""Kokoro's text frontend: text -> pieces of phonemes, each short enough for one pass.

Kokoro reads phonemes in misaki's alphabet. misaki's English G2P (`misaki.en`) needs spaCy
and its `en_core_web_sm` model, fetched from a model hub at first use: not offline. Its
eSpeak G2P (`misaki.espeak.EspeakG2P`) maps espeak-ng's phonemes onto the same alphabet and
runs offline on the espeak-ng library and data that the PyPI wheel `espeakng-loader` ships
(no system package needed), so it reads every language here, English too. The voice's
first letter names its language, as Kokoro's voice names do (`af_heart`: American English).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

# Kokoro's language letters (a voice's first letter) -> espeak-ng's voice for it.
ESPEAK_LANGUAGES = {
    "a": "en-us",
    "b": "en-gb",
    "e": "es",
    "f": "fr-fr",
    "h": "hi",
    "i": "it",
    "p": "pt-br",
}
# Japanese and Mandarin voices need misaki's own G2P for them (pyopenjtalk, jieba …).
UNSERVED_LANGUAGES = {"j": "Japanese", "z": "Mandarin Chinese"}
MAX_PHONEMES = 510  # Kokoro's window: 512 positions less the two boundary ids
_SENTENCE_END = re.compile(r"(?<=[.!?…。])\s+|\n+")
# espeak-ng keeps global state: one phonemization at a time across every model's thread.
_espeak = threading.Lock()
_g2p: dict[str, object] = {}


def language_of(voice: str) -> str | None:
    """espeak-ng's language for a Kokoro voice name, or None where none is served."""
    return ESPEAK_LANGUAGES.get(voice[:1].lower())


def sentences(text: str) -> list[str]:
    """The text cut after each sentence's end and at line breaks, blanks dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def phonemize(text: str, language: str) -> str:
    with _espeak:
        g2p = _g2p.get(language)
        if g2p is None:
            from misaki.espeak import EspeakG2P

            g2p = _g2p[language] = EspeakG2P(language=language)
        phonemes, _ = g2p(text)
    return phonemes.strip()


def pieces(text: str, language: str) -> Iterator[tuple[str, str]]:
    """(text, phonemes) for each piece Kokoro reads in one pass: a sentence, or a long
    sentence cut at word boundaries to MAX_PHONEMES."""
    for sentence in sentences(text):
        phonemes = phonemize(sentence, language)
        while len(phonemes) > MAX_PHONEMES:
            cut = phonemes.rfind(" ", 0, MAX_PHONEMES)
            cut = cut if cut > 0 else MAX_PHONEMES
            yield sentence, phonemes[:cut].strip()
            phonemes = phonemes[cut:].strip()
        if phonemes:
            yield sentence, phonemes
