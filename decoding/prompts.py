"""Turning what a caller sent (text, chat messages or token ids) into the prompt's token ids."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from django.conf import settings

from decoding import tokenizers
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
        tokenizer = tokenizers.tokenizer_for(spec)
        if tokenizer is None:
            raise PromptError(given[0], f"Model {spec.name} takes prompt_token_ids only.")
        if messages is not None:
            text, ids = _chat_prompt(spec, tokenizer, messages)
        else:
            text = prompt
            ids = tokenizer.encode(text, add_special=True)
        prompt_obj = Prompt(ids, text)
    _check_length_and_vocabulary(spec, given[0], prompt_obj.token_ids)
    return prompt_obj


def _chat_prompt(spec: ModelSpec, tokenizer, messages: list[dict]) -> tuple[str, list[int]]:
    """The prompt text and ids of chat messages, tokenised as the whole rendered prompt would
    be (split at special tokens, the text between them tokenised as one run), except that only
    the template's own markup yields special tokens: a caller who writes "<|im_start|>system"
    in a message gets those characters, never a forged turn."""
    if not tokenizer.chat_template:
        raise PromptError("messages", f"Model {spec.name} has no chat template.")
    bos = tokenizer.token_text(tokenizer.bos_token_id) if tokenizer.bos_token_id is not None else ""
    eos = tokenizer.token_text(tokenizer.eos_token_id) if tokenizer.eos_token_id is not None else ""
    # Each content is rendered as a mark no caller can write (a fresh nonce), then put back.
    nonce = secrets.token_hex(8)
    marks = [{**m, "content": f"\ue000{nonce}:{i}\ue001"} for i, m in enumerate(messages)]
    try:
        rendered = render_chat(tokenizer.chat_template, marks, bos=bos, eos=eos)
    except ChatTemplateError as exc:
        raise PromptError("messages", str(exc)) from exc
    pieces = re.split(f"\ue000{nonce}:(\\d+)\ue001", rendered)  # markup, index, markup, ...
    placed = [int(index) for index in pieces[1::2]]
    if placed != list(range(len(messages))):
        raise PromptError(
            "messages",
            f"Model {spec.name}'s chat template rewrites message content, so the content cannot "
            "be kept apart from the template's markup.",
        )
    markup = pieces[0::2]
    specials = _special_tokens(tokenizer, markup)
    split = re.compile("(" + "|".join(map(re.escape, sorted(specials, key=len)[::-1])) + ")")
    ids: list[int] = []
    run = ""  # plain text since the last special token, contents included
    for i, text in enumerate(markup):
        for part in split.split(text) if specials else [text]:
            if part in specials:
                ids += tokenizer.encode(run, add_special=False, parse_special=False) if run else []
                ids.append(specials[part])
                run = ""
            else:
                run += part
        if i < len(messages):
            run += messages[i]["content"]
    ids += tokenizer.encode(run, add_special=False, parse_special=False) if run else []
    contents = [m["content"] for m in messages] + [""]
    return "".join(t + c for t, c in zip(markup, contents, strict=True)), ids


def _special_tokens(tokenizer, markup: list[str]) -> dict[str, int]:
    """The special tokens the template's markup writes, by their text: tokens whose text, read
    as plain text, is not that token (<|im_start|>, the BOS and EOS markers)."""
    found = {}
    for token in {t for text in markup if text for t in tokenizer.encode(text, add_special=False)}:
        text = tokenizer.token_text(token)
        if text and tokenizer.encode(text, add_special=False, parse_special=False) != [token]:
            found[text] = token
    return found


def _check_length_and_vocabulary(spec: ModelSpec, field: str, token_ids: list[int]) -> None:
    if not token_ids:
        raise PromptError(field, "The prompt is empty.")
    limit = settings.PATHFINDER_MAX_PROMPT_TOKENS
    if len(token_ids) > limit:
        raise PromptError(field, f"At most {limit} prompt tokens; got {len(token_ids)}.")
    vocab_size = tokenizers.vocab_size(spec)
    outside = next((t for t in token_ids if not 0 <= t < vocab_size), None)
    if outside is not None:
        raise PromptError(
            field, f"Token id {outside} is outside the model's vocabulary (size {vocab_size})."
        )
