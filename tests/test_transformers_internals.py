"""Pins the private part of transformers runner touches (``runner.transformers_internals``) on the installed
transformers: its compiled chat template renders what ``apply_chat_template`` renders, and the chat renderer runner
builds on it (:func:`runner.data.instruct.chat.template_render`) gives the same text for every prefix a chat's
preparation renders, with a tokenizer's special tokens and with bytes."""

from __future__ import annotations

from typing import Any

import pytest

from runner import transformers_internals as ti
from runner.data.instruct.chat import chat_segments, template_render
from tests.own_llm import own_llm

LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
"""Llama 3's chat template: the BOS, each turn's header, its content trimmed."""
LOOPS = ("{%- set ns = namespace(n=0) -%}{% for m in messages %}{% if m.role == 'assistant' %}{% set ns.n = ns.n + 1 %}"
         "{% endif %}{{ m.role | upper }}{{ loop.index }}: {{ m.content | tojson }}{% if not loop.last %}\n{% endif %}"
         "{% endfor %}{% if add_generation_prompt %}\nASSISTANT ({{ ns.n }} so far): {% endif %}{{ eos_token }}")
"""One that uses transformers' sandbox: a namespace, loop variables, its ``tojson`` filter, ``eos_token``."""
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " What is 2+2? "},
                {"role": "assistant", "content": "4\n"}, {"role": "user", "content": "ünïcode \"quoted\""},
                {"role": "assistant", "content": "Yes."}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(own_llm(tmp_path_factory.mktemp("own") / "llm")))


def prefixes() -> list[tuple[list[dict[str, str]], bool]]:
    return [(CONVERSATION[:i], generation) for i in range(1, len(CONVERSATION) + 1) for generation in (False, True)]


def test_compiled_chat_template_renders_as_apply_chat_template(tokenizer: Any) -> None:
    for template in (LLAMA3, LOOPS):
        compiled = ti.compiled_chat_template(template)
        assert compiled is not None
        for messages, generation in prefixes():
            ours = compiled.render(messages=messages, tools=None, documents=None, add_generation_prompt=generation,
                                   **tokenizer.special_tokens_map)
            assert ours == tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation, chat_template=template)


@pytest.mark.parametrize("template", [None, LLAMA3, LOOPS], ids=["own", "llama3", "loops"])
def test_runners_chat_render_is_apply_chat_templates_text(tokenizer: Any, template: str | None) -> None:
    render = template_render(tokenizer, template)
    assert render is not None
    for messages, generation in prefixes():
        assert render(messages, generation) == tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation, chat_template=template)
    if template is not None:  # bytes: the template alone, no special tokens
        from transformers.utils.chat_template_utils import render_jinja_template

        alone = template_render(None, template)
        assert alone is not None
        for messages, generation in prefixes():
            texts, _ = render_jinja_template([messages], chat_template=template, add_generation_prompt=generation,
                                             bos_token="", eos_token="")
            assert alone(messages, generation) == texts[0]


def test_a_chat_is_rendered_once_whole_and_twice_an_answer_but_its_last(tokenizer: Any) -> None:
    """What makes a chat's preparation cost: each assistant turn's prefix with the generation prompt, and through
    the turn, but the conversation through its last turn is the conversation, rendered once."""
    render = template_render(tokenizer, None)
    assert render is not None
    calls: list[int] = []

    def counted(messages: list[dict[str, str]], generation: bool) -> str:
        calls.append(len(messages))
        return render(messages, generation)

    segments = chat_segments(CONVERSATION, counted)
    assert "".join(t for t, _ in segments) == render(CONVERSATION, False)
    assert sorted(calls) == [2, 3, 4, 5]  # before each answer, through the first, and the whole once
    calls.clear()
    chat_segments([*CONVERSATION, {"role": "user", "content": "Thanks"}], counted)
    assert sorted(calls) == [2, 3, 4, 5, 6]
