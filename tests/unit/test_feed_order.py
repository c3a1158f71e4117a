"""The batch feeder's order (decoding.feed_order, issue 42): sorting lines by feed key puts the
lines of one document side by side whatever the file's order, and only a shared 64-token block
or more counts as a shared document."""

import random

from decoding.feed_order import BLOCK_TOKENS, feed_key, shared_blocks


def prompt(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(49152) for _ in range(length)]


def test_a_shuffled_set_of_documents_and_questions_sorts_a_document_at_a_time():
    rng = random.Random(42)
    # Documents of many lengths, some sharing a long preamble (a firm's letterhead), one
    # shorter than a block: each asked five questions of a few tokens.
    preamble = prompt(rng, 150)
    documents = [prompt(rng, n) for n in (64, 65, 127, 300, 871, 1500)]
    documents += [preamble + prompt(rng, 200), preamble + prompt(rng, 90)]
    lines = [
        (doc, document + prompt(rng, rng.randrange(3, 40)))
        for doc, document in enumerate(documents)
        for _ in range(5)
    ]
    rng.shuffle(lines)
    ordered = [doc for doc, tokens in sorted(lines, key=lambda line: feed_key(line[1]))]
    runs = [doc for i, doc in enumerate(ordered) if i == 0 or ordered[i - 1] != doc]
    assert sorted(runs) == list(range(len(documents)))  # each document in one run


def test_shared_blocks_counts_only_whole_shared_blocks():
    rng = random.Random(7)
    document = prompt(rng, 3 * BLOCK_TOKENS + 10)
    a, b = document + [1, 2, 3], document + [4, 5]
    assert shared_blocks(feed_key(a), feed_key(b)) == 3
    assert shared_blocks(feed_key(a), feed_key(a)) == 3  # the tail is not a block
    nearly = document[: BLOCK_TOKENS - 1]
    assert shared_blocks(feed_key(nearly + [9] * 70), feed_key(nearly + [8] * 70)) == 0
    changed = list(document)
    changed[BLOCK_TOKENS] += 1  # the second block differs: so does every block after it
    assert shared_blocks(feed_key(document), feed_key(changed)) == 1
    assert shared_blocks(feed_key([1, 2]), feed_key([1, 2])) == 0
    assert shared_blocks(feed_key([]), feed_key(document)) == 0


def test_a_key_stays_within_an_index_entry_however_long_the_prompt():
    assert len(feed_key(list(range(100_000)))) <= 2052
