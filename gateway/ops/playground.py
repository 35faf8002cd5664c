"""The playground's routes: OpenAI chat completions and embeddings, the very handlers of
`/v1/...`, under `/ui/api/playground/` where the admin key opens them too (on `/v1` only
API keys do). Any API key may use them for the models it may use; the admin for every model.
Their requests are Activity rows like any other (protocol `openai`)."""

from __future__ import annotations

from litestar import post

from gateway.openai.chat import chat_completions
from gateway.openai.embeddings import openai_embeddings

PLAYGROUND = {"admin_too": True}  # the API-key guard lets the admin key through here

chat = post(
    "/ui/api/playground/chat/completions", status_code=200, opt=PLAYGROUND, name="playground-chat"
)(chat_completions.fn)
embeddings = post(
    "/ui/api/playground/embeddings", status_code=200, opt=PLAYGROUND, name="playground-embed"
)(openai_embeddings.fn)

ROUTES = [chat, embeddings]
