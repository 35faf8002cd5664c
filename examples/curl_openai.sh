#!/bin/sh
# The gateway's OpenAI routes with curl: models, chat (plain and streamed), completions,
# responses (plain and streamed).
#
#   GATEWAY_URL=http://127.0.0.1:8000 sh examples/curl_openai.sh
#
# GATEWAY_MODEL picks the model (default: the shipped config's `default` alias);
# GATEWAY_API_KEY is sent as a bearer key when set.
set -eu

URL="${GATEWAY_URL:-http://127.0.0.1:8000}"
MODEL="${GATEWAY_MODEL:-default}"

send() {  # curl, with the bearer key when one is set: fail (exit 22) on an HTTP error
  if [ -n "${GATEWAY_API_KEY:-}" ]; then
    curl -sSN --fail-with-body -H "authorization: Bearer ${GATEWAY_API_KEY}" "$@"
  else
    curl -sSN --fail-with-body "$@"
  fi
}

post() {  # post PATH JSON, printing the body (an HTTP error's too)
  send -H 'content-type: application/json' "${URL}$1" -d "$2"
  echo
}

echo "== GET /v1/models"
send "${URL}/v1/models"
echo

echo "== POST /v1/chat/completions"
post /v1/chat/completions '{"model": "'"${MODEL}"'", "max_tokens": 40,
  "messages": [{"role": "user", "content": "What is the capital of France?"}]}'

echo "== POST /v1/chat/completions (stream)"
post /v1/chat/completions '{"model": "'"${MODEL}"'", "max_tokens": 20, "stream": true,
  "stream_options": {"include_usage": true},
  "messages": [{"role": "user", "content": "Say hello."}]}'

echo "== POST /v1/completions"
post /v1/completions '{"model": "'"${MODEL}"'", "max_tokens": 12, "temperature": 0,
  "prompt": "The capital of France is"}'

echo "== POST /v1/responses"
post /v1/responses '{"model": "'"${MODEL}"'", "max_output_tokens": 40,
  "instructions": "Answer in one sentence.", "input": "What is the capital of France?"}'

echo "== POST /v1/responses (stream)"
post /v1/responses '{"model": "'"${MODEL}"'", "max_output_tokens": 20, "stream": true,
  "input": "Say hello."}'
