"""What a client may ask of its model's residency, as one request to the model's runner
(`Runner.reside`): the runner is the only one that changes it, as llama-swap's `Process`
is the only one that starts and stops its server. Adapters ask; they never write a
runner's settings.

- `KeepAlive`: a request's keep-alive (Ollama's `keep_alive`): the idle seconds an
  on-demand model stays loaded after its latest request (inf: it stays; 0: it unloads once
  idle; None: its `idle_ttl` again). A model pinned in models.yaml stays whatever is asked.
  With `now` (Ollama's load request, no prompt) it applies at once: a keep-alive of 0
  unloads the model, any other loads it.
- `Pin`: the ops page's pin: loaded now (a failed model tried again), no idle unload.
- `Unpin`: back to the model's `idle_ttl`; refused for a model pinned in models.yaml.
"""

from __future__ import annotations

from typing import NamedTuple


class KeepAlive(NamedTuple):
    seconds: float | None
    now: bool = False


class Pin(NamedTuple):
    pass


class Unpin(NamedTuple):
    pass


Residency = KeepAlive | Pin | Unpin
