"""Structured outputs (issue 44 item 1, engine.grammar): a response_format's grammar masks the
target's distribution at every position, drafts are cut where the grammar refuses a token, and
the output is distributed exactly as the constrained target's alone (greedy: its own greedy).

A byte vocabulary of eight tokens stands in for a model's (llguidance reads it as it reads any
tokenizer), so that exact laws can be enumerated and thousands of generations run in seconds.
"""

import json

import numpy as np
import pytest
from llguidance import LLTokenizer, TokenizerWrapper
from scipy.stats import chisquare

from decoding.engine import (
    DraftModelDrafter,
    GenerationParams,
    GenerationRequest,
    PromptLookupDrafter,
    ResponseFormat,
    ResponseFormatError,
    SpeculativeDecoder,
    StubProvider,
    Tokenizer,
)
from decoding.engine.grammar import Constraint, masked
from decoding.engine.sampling import warp
from tests.chisquare import pool_small_cells

EOS, QUOTE, A, B, C, OPEN, CLOSE, SPACE = range(8)
PIECES = [b"", b'"', b"a", b"b", b"c", b"{", b"}", b" "]
VOCAB = len(PIECES)
# Five two-letter words, so the law of the two letters after the opening quote is enumerable.
WORDS = ["ab", "ac", "ba", "ca", "cc"]
ENUM = ResponseFormat.parse(
    {"type": "json_schema", "json_schema": {"name": "word", "schema": {"enum": WORDS}}}
)


class ByteVocabulary:
    """What llguidance's TokenizerWrapper reads: each token's bytes (end-of-text marked special
    by its leading 0xff, as llguidance's own readers mark control tokens)."""

    tokens = [b"\xff<eos>", *PIECES[1:]]
    eos_token_id = EOS
    bos_token_id = None
    special_token_ids = [EOS]

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        # Bytes the vocabulary cannot spell (the library's probe, b"test") are left out.
        return [PIECES.index(bytes([byte])) for byte in data if bytes([byte]) in PIECES[1:]]


class ByteTokenizer(Tokenizer):
    vocab_size = VOCAB
    bos_token_id = None
    eos_token_id = EOS
    chat_template = None
    _grammar = LLTokenizer(TokenizerWrapper(ByteVocabulary()), slices=[])

    def encode(self, text, *, add_special=True, parse_special=True):
        return ByteVocabulary()(text.encode())

    def decode(self, token_ids):
        return b"".join(PIECES[token] for token in token_ids).decode()

    def piece(self, token_id):
        return PIECES[token_id].decode()

    def grammar_tokenizer(self):
        return self._grammar


def allowed_after(tokens: list[int]) -> set[int]:
    constraint = Constraint(ENUM, ByteTokenizer().grammar_tokenizer())
    constraint.advance(tuple(tokens))
    return set(np.flatnonzero(constraint.masks([])[0]).tolist())


SPEC = "response_format.json_schema"


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ("json", "response_format"),
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"schema": {}}}, f"{SPEC}.name"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, f"{SPEC}.schema"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}},
            "response_format.json_schema.strict",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}},
            "response_format.json_schema.schema",
        ),
    ],
)
def test_a_response_format_the_service_cannot_take_is_refused_naming_its_field(given, field):
    with pytest.raises(ResponseFormatError) as refused:
        ResponseFormat.parse(given)
    assert refused.value.field == field


def test_text_is_no_constraint_and_a_stored_schema_keeps_its_key_order():
    assert ResponseFormat.parse({"type": "text"}) is None
    assert ResponseFormat.parse(None) is None
    schema = {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {}}}
    given = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    stored = ResponseFormat.parse(given).stored()
    assert list(json.loads(stored)["json_schema"]["schema"]["properties"]) == ["zeta", "alpha"]
    assert ResponseFormat.from_stored(stored) == ResponseFormat.parse(given)
    assert ResponseFormat.from_stored("") is None


def test_the_masks_follow_the_grammar_along_a_draft_and_leave_its_state_where_it_was():
    constraint = Constraint(ENUM, ByteTokenizer().grammar_tokenizer())
    assert constraint.allowed_prefix([QUOTE, A, A]) == 2  # "aa is no word's start
    rows = constraint.masks([QUOTE, C])
    assert [set(np.flatnonzero(row).tolist()) for row in rows] == [{QUOTE}, {A, B, C}, {A, C}]
    assert set(np.flatnonzero(constraint.masks([])[0]).tolist()) == {QUOTE}  # rolled back
    constraint.advance((QUOTE, B, A, QUOTE))
    assert set(np.flatnonzero(constraint.masks([])[0]).tolist()) == {EOS}  # complete
    constraint.advance((EOS,))  # end-of-text ends the output; it is not fed to the grammar


def test_masked_logits_refuse_a_mask_that_leaves_nothing():
    logits = np.zeros((1, 3), dtype=np.float32)
    assert masked(logits, np.array([[True, False, True]])).tolist() == [[0, -np.inf, 0]]
    with pytest.raises(ValueError, match="no token"):
        masked(logits, np.zeros((1, 3), dtype=bool))


def decoder_for(drafter, sink, target):
    return SpeculativeDecoder(drafter, target, sink, tokenizer=ByteTokenizer())


def noisy_draft():
    return DraftModelDrafter(
        StubProvider(vocab_size=VOCAB, seed=0, noise_seed=1, noise=1.0, sharpness=1.0)
    )


def test_greedy_under_a_grammar_equals_the_constrained_targets_sequential_greedy(sink):
    target = StubProvider(vocab_size=VOCAB, seed=3, sharpness=2.0)
    decoder = decoder_for(noisy_draft(), sink, target)
    params = GenerationParams(max_tokens=8, temperature=0, draft_length=3, eos_token_id=EOS)
    for prompt in [(1, 2, 3), (5,), (7, 7, 7), (6, 0, 4), (2, 2), (4, 1, 7, 3)]:
        request = GenerationRequest("r", prompt, params, response_format=ENUM)
        speculative = decoder.generate(request)
        output: list[int] = []  # the constrained target alone: argmax of the masked logits
        while not output or output[-1] != EOS:
            logits = target.logits([*prompt, *output], 1)[0]
            allowed = np.isin(np.arange(VOCAB), list(allowed_after(output)))
            output.append(int(np.argmax(np.where(allowed, logits, -np.inf))))
        assert speculative.output_token_ids == tuple(output)
        assert ByteTokenizer().decode(output[:-1]).strip('"') in WORDS
    assert any(record.accepted_count > 0 for record in sink.records)
    assert any(record.accepted_count < record.drafted_count for record in sink.records)


def test_a_drafted_token_the_grammar_refuses_is_cut_before_the_verify_pass(sink):
    # Prompt lookup copies what followed the last '"' in the prompt: a '}' the grammar refuses.
    prompt = (QUOTE, CLOSE, A, SPACE, QUOTE)
    drafter = PromptLookupDrafter(VOCAB)
    drafter.prefill(list(prompt), ())
    proposed = drafter.propose(list(prompt), 3, GenerationParams(), seed=0, step=0)
    assert proposed.tokens.tolist()[0] == CLOSE
    target = StubProvider(vocab_size=VOCAB, seed=3)
    params = GenerationParams(max_tokens=8, temperature=0, draft_length=3, eos_token_id=EOS)
    decoder_for(PromptLookupDrafter(VOCAB), sink, target).generate(
        GenerationRequest("r", prompt, params, response_format=ENUM)
    )
    assert sink.records[0].drafted_count == 0  # '}' and what followed it were never verified
    emitted: list[int] = []
    for record in sink.records:  # every verified draft is one the grammar takes whole
        constraint = Constraint(ENUM, ByteTokenizer().grammar_tokenizer())
        constraint.advance(tuple(emitted))
        drafted = record.verdict.tokens.tolist()
        assert constraint.allowed_prefix(drafted) == len(drafted)
        emitted.extend(record.emitted)


SEEDS = 4000


def test_a_grammar_is_not_sampled_under_the_step_keyed_rule(sink):
    # Cutting the draft before a refused token would emit a draw from p where that token's
    # certain rejection draws from the residual: measured, chi-square p-values of 1e-37 and
    # 1e-6 on the test below. Coupled draws (every new trail's) have no residual to get wrong.
    target = StubProvider(vocab_size=VOCAB, seed=0)
    params = GenerationParams(max_tokens=3, draft_length=2, seed=1, eos_token_id=EOS)
    request = GenerationRequest("r", (2, 4), params, coupled=False, response_format=ENUM)
    with pytest.raises(ValueError, match="coupled"):
        decoder_for(noisy_draft(), sink, target).generate(request)


@pytest.mark.parametrize("params", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}])
def test_sampled_output_under_a_grammar_is_distributed_as_the_constrained_target_alone(
    sink, params
):
    target = StubProvider(vocab_size=VOCAB, seed=0, sharpness=1.0)
    decoder = decoder_for(noisy_draft(), sink, target)
    prompt = (2, 4)
    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(SEEDS):
        run = GenerationParams(max_tokens=3, draft_length=2, seed=seed, eos_token_id=EOS, **params)
        request = GenerationRequest("r", prompt, run, coupled=True, response_format=ENUM)
        quote, first, second = decoder.generate(request).output_token_ids
        assert quote == QUOTE
        counts[first, second] += 1
    assert any(record.accepted_count < record.drafted_count for record in sink.records)
    assert any(0 < record.accepted_count == record.drafted_count for record in sink.records)

    # The constrained target's own law of the two letters: each position's logits masked by
    # the grammar, then warped as the request asks.
    warping = GenerationParams(**params)

    def law(after: list[int]) -> np.ndarray:
        logits = target.logits([*prompt, *after], 1)
        allowed = np.isin(np.arange(VOCAB), list(allowed_after(after)))[None, :]
        return warp(masked(logits, allowed), warping)[0]

    first_law = law([QUOTE])
    joint = np.stack(
        [first_law[t] * law([QUOTE, t]) if first_law[t] else np.zeros(VOCAB) for t in range(VOCAB)]
    )
    expected = SEEDS * joint.ravel()
    observed = counts.ravel()
    assert observed[expected == 0].sum() == 0  # never a token the grammar refuses
    observed, expected = pool_small_cells(observed[expected > 0], expected[expected > 0])
    assert chisquare(observed, expected).pvalue > 0.001
