"""Copied drafts driven by their match: the longest match in the context or the matter's
references, a source named in every draft and record, a length chosen from the match."""

import numpy as np
import pytest

from decoding.engine import (
    GenerationParams,
    GenerationRequest,
    MatchSchedule,
    MatchStatistics,
    PromptLookupDrafter,
    Reference,
    SpeculativeDecoder,
    StubProvider,
)
from decoding.engine.drafters.prompt_lookup import CONTEXT
from decoding.engine.schedule import MATCH_BUCKETS, MATCH_PRIORS, match_bucket

PARAMS = GenerationParams()
# A verify pass over n positions costs 10 + n: long drafts are cheap, as on real kernels.
FLAT = {1: 11.0, 17: 27.0}
# Each extra position costs as much as the first: no draft ever pays for its verify.
STEEP = {1: 10.0, 17: 170.0}


def draft(context, k=8, references=(), **ngrams):
    drafter = PromptLookupDrafter(64, max_ngram=ngrams.pop("max_ngram", 32), **ngrams)
    drafter.prefill(context, references)
    return drafter.propose(context, k, PARAMS, seed=0, step=0)


def test_the_longest_match_wins_and_its_length_is_measured_beyond_three_tokens():
    context = [9, 1, 2, 3, 4, 5, 30, 31, 7, 3, 4, 5, 40, 41, 1, 2, 3, 4, 5]
    found = draft(context, k=2)
    assert found.tokens.tolist() == [30, 31]  # after the 5-token match, not the later 3-token one
    assert found.source.reference == CONTEXT
    assert found.source.match_length == 5
    assert context[found.source.offset : found.source.offset + 2] == [30, 31]


def test_a_reference_is_copied_from_when_it_holds_the_longer_match():
    earlier = Reference("job-1", np.array([50, 51, 52, 53, 54, 55, 56, 57], dtype=np.int64))
    context = [1, 52, 9, 50, 51, 52]
    found = draft(context, k=3, references=[earlier])
    assert found.tokens.tolist() == [53, 54, 55]
    assert (found.source.reference, found.source.offset, found.source.match_length) == (
        "job-1", 3, 3,
    )  # fmt: skip
    assert earlier.tokens[3:6].tolist() == found.tokens.tolist()


def test_the_context_wins_a_tie_with_a_reference():
    earlier = Reference("job-1", np.array([7, 8, 60, 61], dtype=np.int64))
    found = draft([7, 8, 20, 21, 7, 8], k=2, references=[earlier])
    assert found.source.reference == CONTEXT and found.tokens.tolist() == [20, 21]


def test_nothing_is_drafted_without_a_match_of_min_ngram_tokens():
    assert draft([1, 2, 3, 4], k=4).source is None
    found = draft([5, 6, 9, 1, 6], k=4, min_ngram=2)
    assert len(found.tokens) == 0 and found.source is None


def test_a_draft_cut_to_a_prefix_keeps_its_source_unless_nothing_is_left():
    found = draft([1, 2, 3, 4, 5, 1, 2], k=3)
    assert found.prefix(1).tokens.tolist() == [3] and found.prefix(1).source == found.source
    assert found.prefix(0).source is None and len(found.prefix(0).tokens) == 0


def test_match_buckets_cover_every_length():
    assert [match_bucket(n) for n in (1, 3, 4, 7, 8, 15, 16, 31, 32, 500)] == [
        0, 0, 1, 1, 2, 2, 3, 3, 4, 4,
    ]  # fmt: skip
    assert len(MATCH_PRIORS) == len(MATCH_BUCKETS)
    assert list(MATCH_PRIORS) == sorted(MATCH_PRIORS)  # a longer match is no likelier to fail


def test_without_a_match_the_schedule_keeps_nothing_a_one_position_step():
    schedule = MatchSchedule(16, FLAT)
    assert schedule.next_length(16) == 16  # the drafter may look as far as it likes
    assert schedule.keep(draft([1, 2, 3, 4], k=16)) == 0


def test_a_long_match_drafts_the_whole_continuation_when_verifying_is_cheap():
    context = [*range(10, 50), 5, *range(10, 50)]  # the last 40 tokens occurred before
    found = draft(context, k=16, max_ngram=64)
    assert found.source.match_length == 40 and len(found.tokens) == 16
    assert MatchSchedule(16, FLAT).keep(found) == 16
    # A shorter match is likelier to end soon: a shorter prefix pays better.
    shorter = draft([*range(10, 20), 5, *range(10, 20)], k=16)
    assert 0 < MatchSchedule(16, FLAT).keep(shorter) < 16


def test_where_verifying_more_positions_never_pays_it_drafts_nothing_but_probes_now_and_then():
    schedule = MatchSchedule(16, STEEP, probe_interval=3, probe_length=2)
    found = draft([*range(10, 30), 5, *range(10, 30)], k=16)
    kept = []
    for _ in range(6):
        kept.append(schedule.keep(found))
        schedule.observe(kept[-1], 0)
    assert kept == [0, 0, 2, 0, 0, 2]


def test_rejections_in_one_bucket_shorten_drafts_there_but_not_for_longer_matches():
    statistics = MatchStatistics()
    schedule = MatchSchedule(16, {1: 10.0, 17: 60.0}, statistics)
    short = draft([1, 2, 3, 40, 41, 42, 43, 1, 2, 3], k=16)  # a 3-token match
    long = draft([*range(10, 30), 5, *range(10, 30)], k=16)
    long_before = schedule.keep(long)
    schedule.observe(0, 0)  # nothing verified: nothing learnt
    before = schedule.keep(short)
    schedule.observe(before, 0)
    for _ in range(5):
        schedule.observe(schedule.keep(short), 0)
    assert statistics.acceptance[0] < MATCH_PRIORS[0]
    assert schedule.keep(short) < before
    assert schedule.keep(long) == long_before > 0
    assert statistics.acceptance[match_bucket(20)] == MATCH_PRIORS[match_bucket(20)]


def test_what_one_job_learnt_the_next_one_starts_from():
    statistics = MatchStatistics()
    first = MatchSchedule(16, {1: 10.0, 17: 60.0}, statistics)
    short = draft([1, 2, 3, 40, 41, 42, 43, 1, 2, 3], k=16)
    for _ in range(6):
        first.observe(first.keep(short), 0)
    assert MatchSchedule(16, {1: 10.0, 17: 60.0}, statistics).keep(short) == first.keep(short)
    assert MatchSchedule(16, {1: 10.0, 17: 60.0}).keep(short) > first.keep(short)


@pytest.mark.parametrize("rows", [1, 20])
def test_every_record_names_its_drafts_source_and_the_output_stays_the_targets(rows):
    target = StubProvider(vocab_size=32, seed=0)
    drafter = PromptLookupDrafter(32, min_ngram=1, max_ngram=8)

    class Keep:
        records = []

        def record(self, record):
            self.records.append(record)

        def flush(self):
            pass

    sink = Keep()
    prompt = tuple(np.random.default_rng(rows).integers(0, 32, size=40).tolist())
    params = GenerationParams(max_tokens=24, temperature=0.0, draft_length=8)
    request = GenerationRequest("r", prompt, params)
    result = SpeculativeDecoder(drafter, target, sink).generate(
        request, schedule=MatchSchedule(8, FLAT)
    )
    plain = []
    for _ in range(len(result.output_token_ids)):
        plain.append(int(np.argmax(target.logits([*prompt, *plain], 1)[0])))
    assert list(result.output_token_ids) == plain  # exactness (greedy) is untouched
    for record in sink.records:
        source = record.payload()["draft_source"]
        if record.drafted_count == 0:
            assert source is None
            continue
        context = [*prompt, *result.output_token_ids][: record.context_length]
        drafted = [int(t) for t in record.verdict.tokens]
        assert source["reference"] == CONTEXT
        assert context[source["offset"] : source["offset"] + len(drafted)] == drafted
        assert (
            context[source["offset"] - source["match_length"] : source["offset"]]
            == (context[len(context) - source["match_length"] :])
        )
