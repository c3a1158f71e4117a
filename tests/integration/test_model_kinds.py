"""Model kinds in one place: every provider and drafter a spec can name is one class in the
registry, which the spec's choices, its configuration check and the worker's loading all use."""

import pytest
from django.core.exceptions import ValidationError

from decoding.engine import DraftModelDrafter, PromptLookupDrafter
from decoding.kinds.registry import DRAFTER_KINDS, PROVIDER_KINDS
from decoding.model_specs import params_refusal
from decoding.models import ModelSpec
from decoding.worker import runtime


def test_a_specs_choices_are_exactly_the_registered_kinds():
    fields = {f.name: f for f in ModelSpec._meta.get_fields()}
    assert [name for name, _ in fields["provider"].choices] == list(PROVIDER_KINDS)
    assert [name for name, _ in fields["drafter"].choices] == list(DRAFTER_KINDS)
    assert set(PROVIDER_KINDS) == {"llamacpp", "transformers", "remote", "stub"}
    assert set(DRAFTER_KINDS) == {"prompt_lookup", "draft_model"}


def spec(**fields) -> ModelSpec:
    return ModelSpec(name="probe", **{"provider": "stub", "drafter": "prompt_lookup", **fields})


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"drafter_settings": {"min_ngram": 4, "max_ngram": 2}}, "drafter_settings", "min_ngram"),
        (
            {"drafter": "draft_model", "drafter_settings": {"provider": "tpu"}},
            "drafter_settings",
            "unknown draft provider",
        ),
        (
            {
                "drafter": "draft_model",
                "drafter_settings": {"provider": "remote", "provider_settings": {"base_url": "x"}},
            },
            "drafter_settings",
            "base_url",
        ),
        (
            {"provider": "remote", "provider_settings": {"base_url": "ftp://h"}},
            "provider_settings",
            "base_url",
        ),
        ({"provider": "llamacpp", "path": "/nowhere.gguf"}, "path", "does not exist"),
    ],
)
def test_each_kind_refuses_settings_that_cannot_work_naming_the_field(db, fields, field, words):
    with pytest.raises(ValidationError) as refused:
        spec(**fields).full_clean()
    assert words in " ".join(refused.value.message_dict[field])


def test_a_kind_refuses_what_its_model_cannot_decode_exactly():
    remote = spec(
        provider="remote", provider_settings={"base_url": "http://h/v1", "top_logprobs": 7}
    )
    assert params_refusal(remote, temperature=0.7, top_k=7) is None
    field, reason = params_refusal(remote, temperature=0.7, top_k=8)
    assert field == "top_k" and "the 7 log-probabilities" in reason
    assert params_refusal(remote, temperature=0, top_k=0) is None  # greedy needs only the top
    # A remote draft model (20 log-probabilities by default) limits its local target too.
    draft = spec(
        drafter="draft_model",
        drafter_settings={"provider": "remote", "provider_settings": {"base_url": "http://h/v1"}},
    )
    assert params_refusal(draft, temperature=0.7, top_k=20) is None
    assert params_refusal(draft, temperature=0.7, top_k=21)[0] == "top_k"
    assert params_refusal(spec(), temperature=0.7, top_k=0) is None


def test_the_worker_builds_each_spec_through_its_kinds(db):
    lookup, _ = runtime.models_for(ModelSpec.objects.get(name="smollm2-135m-instruct"))
    assert isinstance(lookup.drafter, PromptLookupDrafter)
    assert (lookup.drafter.min_ngram, lookup.drafter.max_ngram) == (3, 32)
    assert lookup.target.identity.runtime == "llama.cpp"
    stub, _ = runtime.models_for(ModelSpec.objects.get(name="stub"))
    assert isinstance(stub.drafter, DraftModelDrafter) and stub.tokenizer is None
