"""A remote model's identity is written into every audit record: never with its credentials."""

import pytest

from decoding.engine.providers.remote import public_url


@pytest.mark.parametrize(
    ("given", "recorded"),
    [
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
        ("https://alice:s3cret@llm.example/v1", "https://llm.example/v1"),
        ("https://llm.example/v1?api_key=sk-123&x=1", "https://llm.example/v1"),
        ("https://token@llm.example:8443/v1#frag", "https://llm.example:8443/v1"),
        ("http://user:pw@[::1]:9000/v1", "http://[::1]:9000/v1"),
    ],
)
def test_the_recorded_url_drops_user_password_query_and_fragment(given, recorded):
    assert public_url(given) == recorded
