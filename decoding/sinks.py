"""The engine's audit sink, backed by the audit store: each record is committed before returning."""

import uuid

from audit.store import trail_append
from decoding.engine import StepRecord


class TrailSink:
    def __init__(self, trail_id: uuid.UUID):
        self.trail_id = trail_id

    def record(self, record: StepRecord) -> None:
        trail_append(trail_id=self.trail_id, payload=record.payload())
