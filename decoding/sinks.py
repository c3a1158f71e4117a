"""The engine's audit sink, backed by the audit store."""

import time
import uuid

from audit.chain import canonical_json
from audit.store import trail_extend
from decoding.engine import AuditSink, StepRecord
from decoding.metrics import AUDIT_COMMIT_SECONDS

# Records held before a commit is forced, when the decoder releases nothing in between: a
# transaction per step costs 14-26% of decode time on a CPU model, one per 16 steps ~3%
# (bench/results). The decoder still flushes before any token leaves.
BATCH_STEPS = 16


class TrailSink(AuditSink):
    """Appends records to one trail, in one transaction per batch of steps, after the head its
    last append left (`head`: the next seq and the head hash); it is the trail's only writer."""

    def __init__(
        self, trail_id: uuid.UUID, *, head: tuple[int, str], batch_steps: int = BATCH_STEPS
    ):
        self.trail_id = trail_id
        self._head = head
        self._batch_steps = batch_steps
        self._pending: list[str] = []

    def record(self, record: StepRecord) -> None:
        self._pending.append(canonical_json(record.payload()))
        if len(self._pending) >= self._batch_steps:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            started = time.perf_counter()
            seq, head = self._head
            self._head = trail_extend(
                trail_id=self.trail_id, seq=seq, head=head, texts=self._pending
            )
            AUDIT_COMMIT_SECONDS.observe(time.perf_counter() - started)
            self._pending = []
