import pytest

from decoding.engine import GenerationParams, GenerationRequest


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 0),
        ("max_tokens", 1.5),
        ("max_tokens", True),
        ("temperature", -0.1),
        ("temperature", float("inf")),
        ("temperature", float("nan")),
        ("top_k", -1),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("top_p", float("nan")),
        ("seed", -1),
        ("seed", 2**53),
        ("draft_length", -1),
        ("eos_token_id", -1),
    ],
)
def test_it_rejects_an_out_of_range_value_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        GenerationParams(**{field: value})


def test_the_defaults_are_valid_and_sample_at_temperature_one():
    params = GenerationParams()
    assert (params.max_tokens, params.temperature, params.top_k, params.top_p) == (16, 1.0, 0, 1.0)
    assert (params.seed, params.draft_length, params.eos_token_id) == (0, 4, None)
    assert not params.is_greedy


def test_temperature_zero_means_greedy():
    assert GenerationParams(temperature=0).is_greedy


def test_the_largest_seed_every_json_reader_holds_exactly_is_accepted():
    assert GenerationParams(seed=2**53 - 1).seed == 2**53 - 1


def test_a_request_needs_a_prompt():
    with pytest.raises(ValueError, match="prompt_token_ids"):
        GenerationRequest("r", (), GenerationParams())


def test_a_request_rejects_negative_token_ids():
    with pytest.raises(ValueError, match="prompt_token_ids"):
        GenerationRequest("r", (1, -2), GenerationParams())


def test_a_request_stores_its_prompt_as_a_tuple():
    assert GenerationRequest("r", [1, 2], GenerationParams()).prompt_token_ids == (1, 2)
