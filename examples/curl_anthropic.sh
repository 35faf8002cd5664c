#!/bin/sh
# A streamed Anthropic Messages request with curl: prints the server-sent events as they come
# (message_start, content_block_start, ping, content_block_delta..., message_delta, message_stop).
#
#   GATEWAY_URL=http://127.0.0.1:8000 sh examples/curl_anthropic.sh
set -eu
curl -sSN --fail-with-body "${GATEWAY_URL:-http://127.0.0.1:8000}/v1/messages" \
  -H "content-type: application/json" \
  -H "anthropic-version: 2023-06-01" \
  -H "x-api-key: ${GATEWAY_API_KEY:-unused}" \
  -d '{
    "model": "claude-smollm2",
    "max_tokens": 64,
    "stream": true,
    "system": "You answer in one sentence.",
    "messages": [{"role": "user", "content": "What is the capital of France?"}]
  }'
echo
