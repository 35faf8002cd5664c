"""OpenAI's audio routes: `POST /v1/audio/transcriptions` and `/v1/audio/translations`
(multipart) on any `task: transcribe` model; `POST /v1/audio/speech` and
`GET /v1/audio/voices` on any `task: speech` model. A sibling of the other protocol
packages; its errors are OpenAI's (the default protocol): form (the multipart fields,
checked), formats (json, text, verbose_json, srt, vtt), routes (speech to text), speech
(text to speech)."""
