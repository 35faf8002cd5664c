#!/bin/sh
# Ollama's API with curl: a chat streamed as NDJSON (one JSON object a line, the last with
# "done": true and the token counts), a one-object generate, and the model list.
#
#   GATEWAY_URL=http://127.0.0.1:8000 sh examples/curl_ollama.sh
set -eu
url="${GATEWAY_URL:-http://127.0.0.1:8000}"
auth="Authorization: Bearer ${GATEWAY_API_KEY:-unused}"

curl -sSN --fail-with-body "$url/api/chat" -H "$auth" -H "content-type: application/json" -d '{
  "model": "smollm2",
  "messages": [{"role": "user", "content": "What is the capital of France?"}],
  "options": {"temperature": 0, "num_predict": 64}
}'

curl -sS --fail-with-body "$url/api/generate" -H "$auth" -H "content-type: application/json" -d '{
  "model": "smollm2:latest",
  "prompt": "What is the capital of France?",
  "stream": false,
  "options": {"temperature": 0, "num_predict": 64}
}'
echo

curl -sS --fail-with-body "$url/api/tags" -H "$auth"
echo
