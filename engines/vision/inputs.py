"""A loaded vision model's processor side: a request's text and pictures turned into what
the model takes (`Inputs`: token ids, the processor's tensors, cache keys), on whichever
thread asks (counting runs off the model's thread), and remembered for the last few
requests; and the probe at load that tells a processor unable to take images."""

from __future__ import annotations

import threading

from engines.errors import BadRequest
from engines.mlx.template import render_chat
from engines.vision.budget import Plan, fit_image
from engines.vision.prepared import Inputs
from engines.vision.prompt import cache_keys, decode_image, vision_messages
from schemas.canonical import ChatRequest, ImagePart, Message, TextPart
from schemas.canonical import request_images as images_of

# Preprocessed requests remembered (by identity) for a count followed by a generation.
RECENT_INPUTS = 4


class Preprocessor:
    def __init__(self, model_id: str, processor, image_token: int, plan: Plan) -> None:
        self._model_id = model_id
        self._processor = processor
        self._tokenizer = processor.tokenizer
        self._image_token = image_token
        self.plan = plan  # the pixel budget (disabled when the probe failed)
        # Counting runs off the model's thread; a fast tokenizer used from two threads at
        # once can fail ("Already borrowed"), so preprocessing takes turns.
        self._turns = threading.Lock()
        self._recent: list[tuple[ChatRequest, Inputs]] = []

    def of(self, request: ChatRequest) -> Inputs:
        """`preprocess`, remembered for the last few requests: the same request is often
        counted and generated (Anthropic's stream start, context.overflow: truncate), and
        decoding its pictures twice would double the work."""
        with self._turns:
            for seen, inputs in self._recent:
                if seen is request:
                    return inputs
        inputs = self.preprocess(request)
        with self._turns:
            self._recent = [(request, inputs), *self._recent[: RECENT_INPUTS - 1]]
        return inputs

    def preprocess(self, request: ChatRequest) -> Inputs:
        """Render, decode and fit the images, and run the processor; no MLX model work."""
        from mlx_vlm.utils import prepare_inputs

        images = images_of(request)
        if images and self.plan.disabled:
            raise BadRequest(
                f"Could not process image: model {self._model_id!r} has vision disabled "
                f"({self.plan.disabled}); it serves text only ({images[0].where or 'an image'})"
            )
        if request.raw_prompt is not None:
            text = request.raw_prompt
        else:
            text = render_chat(self._tokenizer, request, vision_messages)
        pictures = [
            fit_image(decode_image(part), self.plan, low=part.detail == "low") for part in images
        ]
        with self._turns:
            tensors = prepare_inputs(
                self._processor,
                images=pictures or None,
                prompts=text,
                image_token_index=self._image_token,
                add_special_tokens=False,  # the template already wrote any BOS it wants
            )
        ids = [int(t) for t in tensors["input_ids"].reshape(-1).tolist()]
        image_tokens = sum(t == self._image_token for t in ids) if images else 0
        keys = cache_keys(ids, self._image_token, images)
        return Inputs(ids, dict(tensors), keys, len(images), image_tokens)

    def probe(self) -> str | None:
        """Run the processor once on a blank picture, so a checkpoint whose processor cannot
        take images says so at load (why, or None when it works)."""
        import io

        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (64, 64), (127, 127, 127)).save(out, "PNG")
        image = ImagePart(data=out.getvalue(), where="probe")
        message = Message(role="user", content="?", parts=[image, TextPart(text="?")])
        probe = ChatRequest(messages=[message], max_tokens=1)
        try:
            if self.of(probe).image_tokens:
                return None
            return "the chat template wrote no image marker for an image part"
        except Exception as error:  # whatever the processor raises, the load reports it
            return f"the image processor fails: {type(error).__name__}: {error}"
