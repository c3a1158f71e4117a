"""The batch line parser under fuzzing (issue 41, item 2): whatever a line holds, line_check
answers a request or a refusal and never raises, and nothing it answers carries a string the
store cannot hold (a NUL, an unpaired surrogate) or a custom_id longer than its column."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoding.protocol.batch_lines import MAX_CUSTOM_ID, LineRefusal, LineRequest, line_check
from decoding.storable import storable

ENDPOINT = "/v1/completions"
# Text with the characters that broke the store: NUL, unpaired surrogates, and plenty else.
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\x00", "\ud800", "\udfff", "\ufeff", "\u2028", '"', "\\"]),
        st.characters(),
    ),
    max_size=40,
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
ENVELOPE_KEYS = st.sampled_from(["custom_id", "method", "url", "body", "prompt", "model"])


def every_string(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *every_string(v)]]
    if isinstance(value, list):
        return [s for item in value for s in every_string(item)]
    return []


def checked(text: str):
    result = line_check(ENDPOINT, text)
    assert isinstance(result, LineRequest | LineRefusal)
    if isinstance(result, LineRefusal):
        assert 400 <= result.status_code < 500
        stored = [result.custom_id or "", *every_string(result.body)]
    else:
        stored = [result.custom_id, *every_string(result.native)]
    assert all(storable(s) for s in stored), stored
    custom_id = result.custom_id
    assert custom_id is None or len(custom_id) <= MAX_CUSTOM_ID
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_any_text_is_answered(text):
    checked(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(ENVELOPE_KEYS | TEXT, JSON, max_size=6), st.booleans())
def test_any_json_object_is_answered(value, ascii_only):
    checked(json.dumps(value, ensure_ascii=ascii_only))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, TEXT, JSON)
def test_a_well_formed_envelope_with_any_values_is_answered(custom_id, prompt, extra):
    line = {
        "custom_id": custom_id,
        "method": "POST",
        "url": ENDPOINT,
        "body": {"model": "stub", "max_tokens": 4, "prompt": prompt, "user": extra},
    }
    checked(json.dumps(line))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(TEXT, JSON, min_size=1, max_size=3), TEXT)
def test_unknown_fields_of_any_name_are_answered(extra, custom_id):
    line = {"method": "POST", "url": ENDPOINT, "body": {"model": "stub", "prompt": "x"}, **extra}
    checked(json.dumps({**line, "custom_id": custom_id or "id"}))
