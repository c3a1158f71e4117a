"""Rendering chat messages through the model's own template (shipped in its GGUF or tokenizer)."""

from __future__ import annotations

from jinja2.sandbox import ImmutableSandboxedEnvironment

_environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)


class ChatTemplateError(ValueError):
    pass


def render_chat(template: str, messages: list[dict[str, str]], *, bos: str, eos: str) -> str:
    """The prompt text for messages, ending where the assistant's reply begins."""

    def raise_exception(message: str):
        raise ChatTemplateError(message)

    try:
        return _environment.from_string(template).render(
            messages=messages,
            add_generation_prompt=True,
            bos_token=bos,
            eos_token=eos,
            raise_exception=raise_exception,
        )
    except ChatTemplateError:
        raise
    except Exception as exc:  # a template is data: any failure in it is the caller's 400
        raise ChatTemplateError(f"the model's chat template failed: {exc}") from exc
