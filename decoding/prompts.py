"""Turning what a caller sent (text, chat messages or token ids) into the prompt's token ids."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from decoding import runtime
from decoding.chat import ChatTemplateError, render_chat
from decoding.models import ModelSpec


class PromptError(ValueError):
    """Bad input in one named field (answered as a 400 naming it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int]
    text: str  # the text that was tokenised ("" when the caller sent ids)


def prompt_tokenize(
    spec: ModelSpec,
    *,
    prompt: str | None = None,
    messages: list[dict] | None = None,
    prompt_token_ids: list[int] | None = None,
) -> Prompt:
    given = [
        name
        for name, value in (
            ("prompt", prompt),
            ("messages", messages),
            ("prompt_token_ids", prompt_token_ids),
        )
        if value is not None
    ]
    if len(given) != 1:
        field = given[1] if given else "prompt"
        raise PromptError(field, "Give exactly one of prompt, messages or prompt_token_ids.")
    if prompt_token_ids is not None:
        prompt_obj = Prompt(list(prompt_token_ids), "")
    else:
        tokenizer = runtime.tokenizer_for(spec)
        if tokenizer is None:
            raise PromptError(given[0], f"Model {spec.name} takes prompt_token_ids only.")
        if messages is not None:
            text = _chat_text(spec, tokenizer, messages)
            ids = tokenizer.encode(text, add_special=False)
        else:
            text = prompt
            ids = tokenizer.encode(text, add_special=True)
        prompt_obj = Prompt(ids, text)
    _check_length_and_vocabulary(spec, given[0], prompt_obj.token_ids)
    return prompt_obj


def _chat_text(spec: ModelSpec, tokenizer, messages: list[dict]) -> str:
    if not tokenizer.chat_template:
        raise PromptError("messages", f"Model {spec.name} has no chat template.")
    bos = tokenizer.token_text(tokenizer.bos_token_id) if tokenizer.bos_token_id is not None else ""
    eos = tokenizer.token_text(tokenizer.eos_token_id) if tokenizer.eos_token_id is not None else ""
    try:
        return render_chat(tokenizer.chat_template, messages, bos=bos, eos=eos)
    except ChatTemplateError as exc:
        raise PromptError("messages", str(exc)) from exc


def _check_length_and_vocabulary(spec: ModelSpec, field: str, token_ids: list[int]) -> None:
    if not token_ids:
        raise PromptError(field, "The prompt is empty.")
    limit = settings.PATHFINDER_MAX_PROMPT_TOKENS
    if len(token_ids) > limit:
        raise PromptError(field, f"At most {limit} prompt tokens; got {len(token_ids)}.")
    vocab_size = runtime.vocab_size(spec)
    outside = next((t for t in token_ids if not 0 <= t < vocab_size), None)
    if outside is not None:
        raise PromptError(
            field, f"Token id {outside} is outside the model's vocabulary (size {vocab_size})."
        )
