"""System turns folded into the leading system prompt for templates that allow one only first."""

from __future__ import annotations

import jinja2
import pytest

from engines.text.tools import fold_system_turns

# The rule Qwen's and Llama 3's templates enforce, in a few lines of the same Jinja.
STRICT_TEMPLATE = jinja2.Environment().from_string(
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
    "[{{ m.role }}] {{ m.content }}\n{% endfor %}"
)


def render(messages):
    def fail(message):
        raise jinja2.TemplateError(message)

    return STRICT_TEMPLATE.render(messages=messages, raise_exception=fail)


def test_later_system_turns_join_the_first_in_order():
    turns = [
        {"role": "system", "content": "a"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "b"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "c"},
        {"role": "user", "content": "go"},
    ]
    with pytest.raises(jinja2.TemplateError):
        render(turns)
    folded = fold_system_turns(turns)
    assert render(folded) == "[system] a\n\nb\n\nc\n[user] hi\n[assistant] ok\n[user] go\n"


def test_a_conversation_without_a_leading_system_prompt_gets_one():
    turns = [{"role": "user", "content": "hi"}, {"role": "system", "content": "b"}]
    assert fold_system_turns(turns) == [
        {"role": "system", "content": "b"},
        {"role": "user", "content": "hi"},
    ]


def test_nothing_to_fold_is_none():
    assert (
        fold_system_turns([{"role": "system", "content": "a"}, {"role": "user", "content": "x"}])
        is None
    )
