"""The real speech clips the speech tests transcribe (moonshine-voice's assets, installed
`--no-deps` by `./setup.sh test`) and the words beckett.wav says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ASSETS = Path(importlib.util.find_spec("moonshine_voice").submodule_search_locations[0]) / "assets"
BECKETT = ASSETS / "beckett.wav"  # 10 s
TWO_CITIES = ASSETS / "two_cities.wav"  # 44 s
# "Ever tried, ever failed. No matter. Try again. Fail again. Fail better."
WORDS = [
    "ever",
    "tried",
    "ever",
    "failed",
    "no",
    "matter",
    "try",
    "again",
    "fail",
    "again",
    "fail",
    "better",
]


def words(text: str) -> list[str]:
    """A transcript's words: lower case, punctuation dropped."""
    return "".join(c for c in text.lower() if c.isalpha() or c.isspace()).split()
