"""An adapter served as a model of its own (`adapters:`): the base's runner, seen under the
adapter's id. Every request submitted through it runs on the base's runner (one base loaded
once) with the adapter named on it; everything else is the base runner's."""

from __future__ import annotations

import msgspec

from engines.runner.runner import Runner
from schemas.config import AdapterConfig, ModelConfig


def adapter_model(base: ModelConfig, adapter: AdapterConfig) -> ModelConfig:
    """The adapter as the listings and the request policy see it: the base's settings under
    the adapter's id and aliases."""
    return msgspec.structs.replace(
        base,
        id=adapter.id,
        aliases=list(adapter.aliases),
        adapters=[],
        steering=adapter.steering,  # its own vector, not the base's
    )


class AdapterView:
    def __init__(
        self,
        runner: Runner,
        base: ModelConfig,
        adapter: AdapterConfig,
        scale: float | None = None,
    ) -> None:
        """`scale`: the one a request chose (OpenAI's `lora`), else the adapter's own."""
        self._runner = runner
        self.model = adapter_model(base, adapter)
        self.adapter = adapter.id
        self.base_id = base.id
        self.scale = scale

    def submit(self, request):
        chosen = msgspec.structs.replace(request, adapter=self.adapter, adapter_scale=self.scale)
        return self._runner.submit(chosen)

    def __getattr__(self, name: str):
        return getattr(self._runner, name)
