"""The cast shared by the engine tests: stub models, hand-written fake models, audit sinks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from decoding.engine import (
    AuditSink,
    DraftModelDrafter,
    ModelIdentity,
    Provider,
    SpeculativeDecoder,
    StepRecord,
    StubProvider,
    Tokenizer,
)


class TableProvider(Provider):
    """A fake model whose next-token probabilities depend only on the prefix length.

    rows maps a prefix length to probabilities (zeros allowed); other lengths are uniform.
    """

    def __init__(self, rows: Mapping[int, Sequence[float]], vocab_size: int = 4, name="table"):
        self.vocab_size = vocab_size
        self.identity = ModelIdentity(name, "test", "0" * 64, "test", "1")
        with np.errstate(divide="ignore"):
            self._logits = {n: np.log(np.asarray(row, dtype=float)) for n, row in rows.items()}

    def logits(self, context: Sequence[int], num_positions: int) -> np.ndarray:
        first = len(context) - num_positions + 1
        lengths = range(first, first + num_positions)
        return np.stack([self._logits.get(n, np.zeros(self.vocab_size)) for n in lengths])


class CountingProvider(StubProvider):
    """A stub model that logs its calls: ("prefill", context) and ("logits", len, positions)."""

    def __init__(self, calls: list, **stub):
        super().__init__(**stub)
        self.calls = calls

    def prefill(self, context):
        self.calls.append((self.identity.name, "prefill", tuple(context)))

    def logits(self, context, num_positions):
        self.calls.append((self.identity.name, "logits", len(context), num_positions))
        return super().logits(context, num_positions)


class FakeTokenizer(Tokenizer):
    """Spells token t as "<t>", and t = 7 as a non-ASCII "é" (the payload keeps it verbatim)."""

    vocab_size = 32
    bos_token_id = None
    eos_token_id = None
    chat_template = None

    def encode(self, text, *, add_special=True, parse_special=True):
        raise NotImplementedError

    def decode(self, token_ids):
        return "".join(self.piece(token) for token in token_ids)

    def piece(self, token_id):
        return "é" if token_id == 7 else f"<{token_id}>"


class MemorySink(AuditSink):
    """Commits records to a list; raises instead of committing the record number `fail_on`."""

    def __init__(self, fail_on: int | None = None):
        self.records: list[StepRecord] = []
        self._fail_on = fail_on

    def record(self, record: StepRecord) -> None:
        if len(self.records) + 1 == self._fail_on:
            raise OSError("disk full")
        self.records.append(record)


@pytest.fixture
def sink() -> MemorySink:
    return MemorySink()


@pytest.fixture
def failing_sink() -> MemorySink:
    return MemorySink(fail_on=3)


@pytest.fixture
def table_decoder(sink):
    """Build a decoder from fake draft and target tables, committing to `sink`."""

    def build(draft_rows, target_rows) -> SpeculativeDecoder:
        drafter = DraftModelDrafter(TableProvider(draft_rows, name="draft"))
        return SpeculativeDecoder(drafter, TableProvider(target_rows, name="target"), sink)

    return build


@pytest.fixture
def target() -> StubProvider:
    return StubProvider(seed=0, name="stub-target")


@pytest.fixture
def draft_model() -> StubProvider:
    """Correlated with `target`, as a distilled draft is: mostly but not always agrees."""
    return StubProvider(seed=0, noise_seed=1, noise=0.5, name="stub-draft")


@pytest.fixture
def decoder(draft_model, target, sink) -> SpeculativeDecoder:
    return SpeculativeDecoder(DraftModelDrafter(draft_model), target, sink)
