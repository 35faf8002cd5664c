"""End to end: the demo vision model (SmolVLM's architecture around the real SmolLM2, a
random vision tower) through each protocol's official client, with images.

The vision tower is random, so what is tested is what is deterministic: different pictures
give different, repeatable answers at temperature 0; the same picture gives the same answer
in every request; two concurrent requests get what each gets alone; image tokens are counted
everywhere; remote images are fetched only as configured.
"""

from __future__ import annotations

import base64
import http.server
import io
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from conftest import serving
from PIL import Image

from engines.vision.demo import build_demo_vlm

TOKENS = 6
ASK = "Describe this picture."
TILE_TOKENS = 16  # the demo's image_seq_len: tokens per 64x64 tile


def png(seed: int, size: tuple[int, int] = (150, 100)) -> bytes:
    """A picture of seeded noise: different seeds, different pictures."""
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + b64(data)


A, B = png(1), png(2)


def blank(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height)).save(out, "PNG", optimize=True)
    return out.getvalue()


BIG = blank(1200, 1200)  # 1.44M pixels in a few kB: past limits.max_image_pixels (1M)


@pytest.fixture(scope="module")
def demo():
    return build_demo_vlm()


@pytest.fixture(scope="module")
def images_site():
    """A local web server with one picture, and a redirect from it to a loopback address."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            if self.path in ("/a.png", "/big.png"):
                body = A if self.path == "/a.png" else BIG
                self.send_response(200)
                self.send_header("content-type", "image/png")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(302)
                # Loopback too, but not the address server.fetch_images_allow lets through.
                self.send_header("location", f"http://[::1]:{self.server.server_port}/a.png")
                self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, demo):
    config = f"""
        server:
          fetch_images: true
          fetch_images_allow: [127.0.0.1/32]  # images_site; every other internal address refused
          limits: {{max_image_pixels: 1000000}}
        models:
          - id: vlm
            source: {demo}
            concurrency: 2
            context: {{max: 2048}}
            sampling: {{temperature: 0}}
          - id: echo
            engine: scripted
    """
    with serving(tmp_path_factory.mktemp("vision"), config) as process:
        yield process


def ask_openai(client, image: bytes, **extra):
    content = [
        {"type": "text", "text": ASK},
        {"type": "image_url", "image_url": {"url": data_url(image), "detail": "auto"}},
    ]
    return client.chat.completions.with_raw_response.create(
        model="vlm",
        messages=[{"role": "user", "content": content}],
        max_tokens=TOKENS,
        **{"temperature": 0, **extra},
    )


@pytest.fixture(scope="module")
def alone(gateway):
    """Each picture's answer through OpenAI, A twice, one request at a time."""
    client = gateway.openai()
    answers = {}
    for name, image in (("A", A), ("A again", A), ("B", B)):
        raw = ask_openai(client, image)
        answers[name] = (raw.parse(), raw.headers["x-request-id"])
    return answers


def test_different_pictures_give_different_repeatable_answers(alone):
    text = {name: completion.choices[0].message.content for name, (completion, _) in alone.items()}
    assert text["A"] and text["B"]
    assert text["A"] != text["B"]
    assert text["A again"] == text["A"]


def test_image_tokens_are_counted_in_usage_and_the_generated_event(gateway, alone):
    completion, request_id = alone["A"]
    generated = gateway.wait_event("generated", request_id=request_id)
    # 150x100 is resized to 256x171 by the processor: 4x3 tiles plus the global one.
    assert generated["images"] == 1 and generated["image_tokens"] == 13 * TILE_TOKENS
    assert completion.usage.prompt_tokens == generated["prompt_tokens"]
    assert generated["prompt_tokens"] > generated["image_tokens"]


def test_the_same_picture_reuses_the_conversation_cache(gateway, alone):
    # The second request asked about A again: its prompt, image hash included, matched the
    # first's, so it continued from that KV cache (in whole 16-token blocks).
    generated = gateway.wait_event("generated", request_id=alone["A again"][1])
    prompt = generated["prompt_tokens"]
    assert prompt - 16 <= generated["reused_prefix_tokens"] < prompt
    # B shares only the text before its picture with A: no block of A's is used for it.
    assert gateway.wait_event("generated", request_id=alone["B"][1])["reused_prefix_tokens"] == 0


def test_streamed_openai_answer_equals_the_plain_one(gateway, alone):
    client = gateway.openai()
    stream = client.chat.completions.create(
        model="vlm",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": ASK},
                    {"type": "image_url", "image_url": {"url": data_url(B)}},
                ],
            }
        ],
        max_tokens=TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == alone["B"][0].choices[0].message.content
    assert chunks[-1].usage.prompt_tokens == alone["B"][0].usage.prompt_tokens


def test_two_concurrent_requests_get_what_each_gets_alone(gateway, alone):
    client = gateway.openai()
    # Both pictures are encoded again, on the model's thread, one after the other; their
    # sequences are then decoded together in one batch.
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda image: ask_openai(client, image).parse(), [B, A]))
    assert together[0].choices[0].message.content == alone["B"][0].choices[0].message.content
    assert together[1].choices[0].message.content == alone["A"][0].choices[0].message.content


def test_a_text_request_batched_with_an_image_request(gateway, alone):
    client = gateway.openai()
    question = [{"role": "user", "content": "What is the capital of France?"}]

    def text():
        reply = client.chat.completions.create(model="vlm", messages=question, max_tokens=8)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(2) as pool:
        pictured = pool.submit(lambda: ask_openai(client, A).parse())
        plain = pool.submit(text)
        assert "Paris" in plain.result()
        assert pictured.result().choices[0].message.content == (
            alone["A"][0].choices[0].message.content
        )


def anthropic_content(image: bytes):
    source = {"type": "base64", "media_type": "image/png", "data": b64(image)}
    return [{"type": "image", "source": source}, {"type": "text", "text": ASK}]


def test_anthropic_image_blocks_plain_streamed_and_counted(gateway):
    client = gateway.anthropic()
    messages = [{"role": "user", "content": anthropic_content(A)}]
    plain = client.messages.create(model="vlm", max_tokens=TOKENS, messages=messages)
    with client.messages.stream(model="vlm", max_tokens=TOKENS, messages=messages) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert plain.content[0].text and streamed == plain.content[0].text
    counted = client.messages.count_tokens(model="vlm", messages=messages)
    # The prompt: the rest, what went to a cache tier, what came from one.
    prompts = [
        u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        for u in (plain.usage, final.usage)
    ]
    assert prompts == [counted.input_tokens] * 2
    other = [{"role": "user", "content": anthropic_content(B)}]
    different = client.messages.create(model="vlm", max_tokens=TOKENS, messages=other)
    assert different.content[0].text != plain.content[0].text


def test_anthropic_url_source_is_fetched(gateway, images_site):
    client = gateway.anthropic()
    by_url = {"type": "image", "source": {"type": "url", "url": f"{images_site}/a.png"}}
    by_data = anthropic_content(A)[0]
    answers = [
        client.messages.create(
            model="vlm",
            max_tokens=TOKENS,
            messages=[{"role": "user", "content": [block, {"type": "text", "text": ASK}]}],
        )
        for block in (by_url, by_data)
    ]
    assert answers[0].content[0].text == answers[1].content[0].text


def test_a_redirect_to_a_loopback_address_is_refused(gateway, images_site):
    body = {
        "model": "vlm",
        "max_tokens": TOKENS,
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": images_site}}]}
        ],
    }
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == "$.messages[0].content[0].image_url: could not fetch image 1"


def test_a_fetched_image_past_the_pixel_limit_is_refused(gateway, images_site):
    block = {"type": "image", "source": {"type": "url", "url": f"{images_site}/big.png"}}
    response = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "vlm", "max_tokens": 4, "messages": [{"role": "user", "content": [block]}]},
        timeout=60,
    )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "1200x1200 pixels" in message and "limits.max_image_pixels" in message


def test_ollama_images_on_chat_and_generate(gateway):
    client = gateway.ollama()
    options = {"temperature": 0, "num_predict": TOKENS}
    messages = [{"role": "user", "content": ASK, "images": [b64(A)]}]
    plain = client.chat(model="vlm", messages=messages, options=options)
    streamed = "".join(
        part.message.content
        for part in client.chat(model="vlm", messages=messages, options=options, stream=True)
    )
    assert plain.message.content and streamed == plain.message.content
    assert plain.prompt_eval_count > 13 * TILE_TOKENS
    other = client.chat(
        model="vlm", messages=[{**messages[0], "images": [b64(B)]}], options=options
    )
    assert other.message.content != plain.message.content
    generated = client.generate(model="vlm", prompt=ASK, images=[b64(A)], options=options)
    assert generated.response == plain.message.content  # the same prompt, the same picture


def test_responses_input_image(gateway, alone):
    client = gateway.openai()
    content = [
        {"type": "input_text", "text": ASK},
        {"type": "input_image", "image_url": data_url(B), "detail": "auto"},
    ]
    response = client.responses.create(
        model="vlm",
        input=[{"role": "user", "content": content}],
        max_output_tokens=TOKENS,
        temperature=0,
    )
    assert response.output_text == alone["B"][0].choices[0].message.content
    assert response.usage.input_tokens == alone["B"][0].usage.prompt_tokens


def test_several_images_interleaved_in_order(gateway):
    client = gateway.openai()

    def ask(first: bytes, second: bytes):
        content = [
            {"type": "text", "text": "First:"},
            {"type": "image_url", "image_url": {"url": data_url(first)}},
            {"type": "text", "text": "Second:"},
            {"type": "image_url", "image_url": {"url": data_url(second)}},
        ]
        raw = client.chat.completions.with_raw_response.create(
            model="vlm", messages=[{"role": "user", "content": content}], max_tokens=TOKENS
        )
        return raw.parse(), gateway.wait_event("generated", request_id=raw.headers["x-request-id"])

    # A square picture is cut into 4x4 tiles, a 150x100 one into 4x3: 17 and 13 tiles.
    square = png(3, (80, 80))
    (answer, event) = ask(A, square)
    assert answer.choices[0].message.content
    assert event["images"] == 2 and event["image_tokens"] == (13 + 17) * TILE_TOKENS


def test_show_reports_vision_and_a_text_model_refuses_images(gateway):
    show = httpx.post(f"{gateway.url}/api/show", json={"model": "vlm"}).json()
    assert "vision" in show["capabilities"]
    text_only = httpx.post(f"{gateway.url}/api/show", json={"model": "echo"}).json()
    assert "vision" not in text_only["capabilities"]


# The pixel budget against the memory budget: weights and KV cache first, then encoding.
KV_PER_TOKEN = 46080  # SmolLM2-135M in float32: 30 layers x 3 heads x 64 x 2 x 4 bytes
WINDOW = 2048
TILE_SEQUENCE_BYTES = 294912  # encoding one 64x64 tile in the demo tower (engines/vision/budget)


def budget_config(demo, weights: int, vision_room: int) -> str:
    budget = weights + KV_PER_TOKEN * WINDOW + vision_room
    return f"""
        server: {{memory_budget: {budget}B}}
        models:
          - id: vlm
            source: {demo}
            context: {{max: {WINDOW}}}
            sampling: {{temperature: 0}}
            vision: {{max_pixels: 65536}}
    """


def weights_of(gateway) -> int:
    return int(gateway.wait_event("model_attached", model="vlm")["detail"]["weights_bytes"])


def test_a_tight_budget_clamps_max_pixels_and_oversize_images_are_resized(gateway, demo, tmp_path):
    # Room for 8 tile encodings: max_pixels 65536 (16 tiles and a global one) cannot fit.
    config = budget_config(demo, weights_of(gateway), 8 * TILE_SEQUENCE_BYTES)
    with serving(tmp_path, config) as clamped:
        attached = clamped.wait_event("model_attached", model="vlm")
        vision = attached["detail"]["vision"]
        assert (
            vision
            == "max_pixels 28672, min_pixels 4096 (clamped from 65536 to fit the memory budget)"
        )
        print("startup line:", attached)
        big = png(4, (1000, 800))  # 800k pixels, fitted to the budget: 2x2 tiles and a global
        raw = ask_openai(clamped.openai(), big)
        assert raw.parse().choices[0].message.content
        generated = clamped.wait_event("generated", request_id=raw.headers["x-request-id"])
        assert generated["image_tokens"] == 5 * TILE_TOKENS


def test_a_budget_that_cannot_fit_min_pixels_disables_vision_but_serves_text(
    gateway, demo, tmp_path
):
    config = budget_config(demo, weights_of(gateway), TILE_SEQUENCE_BYTES)
    with serving(tmp_path, config) as text_only:
        vision = text_only.wait_event("model_attached", model="vlm")["detail"]["vision"]
        assert vision.startswith("disabled: encoding an image of min_pixels 4096 needs")
        client = text_only.openai()
        answer = client.chat.completions.create(
            model="vlm",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8,
        )
        assert "Paris" in answer.choices[0].message.content
        response = httpx.post(
            f"{text_only.url}/v1/chat/completions",
            json={
                "model": "vlm",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": data_url(A)}}],
                    }
                ],
            },
            timeout=60,
        )
        assert response.status_code == 400
        assert "vision disabled" in response.json()["error"]["message"]


def test_a_seeded_sampled_answer_repeats(gateway):
    client = gateway.openai()
    answers = {
        ask_openai(client, A, temperature=1.0, seed=7, top_p=0.9).parse().choices[0].message.content
        for _ in range(2)
    }
    assert len(answers) == 1
