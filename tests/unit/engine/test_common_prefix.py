"""common_prefix: how many leading tokens a KV cache can keep, whether the next context extends
the cache (compared whole) or departs from it somewhere (found token by token)."""

import pytest

from decoding.engine.providers.base import common_prefix


@pytest.mark.parametrize(
    ("cached", "tokens", "shared"),
    [
        ([5, 6, 7], [5, 6, 7, 8, 9], 3),  # the next step extends the cache
        ([5, 6, 7, 8, 9], [5, 6, 7], 3),  # a rollback to a shorter context
        ([5, 6, 7], [5, 6, 7], 3),
        ([5, 6, 7], [4, 6, 7, 8], 0),
        ([5, 6, 7, 8], [5, 6, 0, 8, 9], 2),
        ([5, 6, 7], (5, 6, 7, 8), 3),  # a tuple against a list
        ((5, 6, 7), [5, 9], 1),
        ([], [1, 2], 0),
        ([1, 2], [], 0),
    ],
)
def test_common_prefix_counts_the_leading_tokens_both_share(cached, tokens, shared):
    assert common_prefix(cached, tokens) == shared
