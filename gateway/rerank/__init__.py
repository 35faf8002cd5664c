"""The rerank protocol: `POST /rerank`, `/v1/rerank` (Jina's and Cohere's v1 shape) and
`/v2/rerank` (Cohere's v2), on any model whose engine reranks (a `task: rerank`
cross-encoder, or a `task: embed` model by cosine). A sibling of the other protocol
packages: imports `gateway.canonical`, `gateway.http`, `gateway.control`, the engines' errors
and events, and `schemas`."""
