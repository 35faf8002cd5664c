"""Image prompts without a model: parts in order, cache keys by image content, decoding."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from engines.errors import BadRequest
from engines.policy.truncation import fit_messages
from engines.vision.prompt import cache_keys, decode_image, vision_messages
from schemas.canonical import ChatRequest, ImagePart, Message, TextPart, request_images


def png(color: tuple[int, int, int], size=(8, 8)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


RED, BLUE = ImagePart(data=png((255, 0, 0))), ImagePart(data=png((0, 0, 255)))


def test_image_parts_keep_their_place_among_the_text():
    parts = [TextPart(text="First:"), RED, TextPart(text="Second:"), BLUE]
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="First:Second:", parts=parts),
        Message(role="assistant", content="Two squares."),
    ]
    rendered = vision_messages(messages, [], knows_tools=False)
    assert rendered[0] == {"role": "system", "content": "Be brief."}
    assert rendered[1]["content"] == [
        {"type": "text", "text": "First:"},
        {"type": "image"},
        {"type": "text", "text": "Second:"},
        {"type": "image"},
    ]
    assert rendered[2] == {"role": "assistant", "content": "Two squares."}


def test_cache_keys_follow_the_pictures_not_the_marker_tokens():
    ids = [1, 2, 9, 9, 9, 3]
    red = cache_keys(ids, 9, [RED])
    assert red[:2] == [1, 2] and red[-1] == 3
    assert len(set(red[2:5])) == 1 and red[2] < 0  # every image token: one negative key
    assert cache_keys(ids, 9, [ImagePart(data=png((255, 0, 0)))]) == red  # same content
    assert cache_keys(ids, 9, [BLUE]) != red
    assert cache_keys(ids, 9, [RED, BLUE]) != cache_keys(ids, 9, [BLUE, RED])  # order counts
    assert cache_keys(ids, 9, []) == ids


def test_decoding_refuses_what_is_not_an_image_naming_the_part():
    with pytest.raises(BadRequest, match=r"\$\.messages\[0\]\.content\[1\]: not an image"):
        decode_image(ImagePart(data=b"hello", where="$.messages[0].content[1]"))
    image = decode_image(ImagePart(data=png((0, 255, 0), (5, 3))))
    assert image.mode == "RGB" and image.size == (5, 3)


@pytest.mark.parametrize("kind", ["BMP", "TIFF", "ICO", "PPM"])
def test_only_png_jpeg_webp_and_gif_are_opened(kind):
    # Pillow reads dozens of formats; each plugin is parser code a hostile file could reach.
    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, kind)
    with pytest.raises(BadRequest, match="not an image"):
        decode_image(ImagePart(data=out.getvalue(), where="$.images[0]"))


def test_truncation_drops_old_turns_with_their_images():
    def turn(text: str, image: ImagePart) -> Message:
        return Message(role="user", content=text, parts=[image, TextPart(text=text)])

    request = ChatRequest(
        messages=[
            turn("first", RED),
            Message(role="assistant", content="red"),
            turn("second", BLUE),
        ],
        max_tokens=8,
        overflow="truncate",
    )

    def count(r: ChatRequest) -> int:  # each picture costs 100 tokens, as its image tokens
        return 100 * len(request_images(r)) + sum(len(m.content) for m in r.messages)

    fitted = fit_messages("vlm", request, count, window=150)
    assert fitted.truncated_messages == 2
    assert request_images(fitted) == [BLUE]
