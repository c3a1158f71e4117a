"""A model on an OpenAI-compatible server, verified through prompt log-probabilities; `path`
names a local copy of its vocabulary (and, when it is the served file, its weights' SHA-256)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from . import files
from .base import ProviderKind

DEFAULT_TOP_LOGPROBS = 20


class RemoteKind(ProviderKind):
    name = "remote"
    label = "an OpenAI-compatible server (prompt log-probabilities)"
    masks_exactly = False  # the server reports only its top K tokens

    def vocab_size(self, path: str, *, field: str) -> int:
        return files.vocab_size(path, field=field, directories=False)

    def check(self, options: dict, *, field: str) -> None:
        url = options.get("base_url", "")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValidationError(
                {field: 'a remote model needs "base_url": the server\'s OpenAI API root, e.g. '
                 '"http://host:8000/v1"'}
            )  # fmt: skip
        top = options.get("top_logprobs", DEFAULT_TOP_LOGPROBS)
        if not isinstance(top, int) or top < 1:
            raise ValidationError({field: '"top_logprobs" must be a positive integer'})

    def tokenizer(self, path: str):
        return files.tokenizer(path)

    def top_logprobs(self, options: dict) -> int:
        return options.get("top_logprobs", DEFAULT_TOP_LOGPROBS)

    def refusal(self, options: dict, *, temperature: float, top_k: int) -> tuple[str, str] | None:
        from decoding.engine.providers.remote import params_refusal

        return params_refusal(
            temperature=temperature, top_k=top_k, top_logprobs=self.top_logprobs(options)
        )

    def build(self, path, revision, options, name, *, draft):
        from decoding.engine.providers.remote import RemoteProvider
        from decoding.engine.weights import component_hashes, weights_sha256

        weights = files.resolve_path(path)
        return RemoteProvider(
            options["base_url"],
            tokenizer=files.tokenizer(path),
            name=name,
            model=options.get("model", ""),
            revision=revision,
            sha256=options.get("sha256") or (weights_sha256(weights) if weights.is_file() else ""),
            components=component_hashes(weights),
            top_logprobs=self.top_logprobs(options),
            timeout_s=options.get("timeout_s", 30),
            retries=options.get("retries", 2),
        )
