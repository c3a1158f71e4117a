"""The batch states under fuzzing (issue 41, item 2): hypothesis drives a batch through every
order of what can happen to it (the beat's advance, a worker running a sent line, a cancel, the
window passing, a call of the batch's own matter queued, a refused line in the input), with a
small expansion chunk so a cancel or an expiry can land between chunks. After every step the
batch's status is one OpenAI names and an ended batch never changes again; at the end, driven to
its close, every line of the input is in exactly one of the two files, under its own custom_id,
and request_counts agree with them."""

from __future__ import annotations

import datetime as dt
import json

from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from decoding import batches
from decoding.models import Batch, GenerationJob
from decoding.services import job_submit
from decoding.worker.execution import job_run

from .test_batches import INTERACTIVE, content, create, line, upload

STATUSES = {status.value for status in Batch.Status}
ENDED = {str(status) for status in Batch.ENDED}


def fuzzed_batches(app) -> type[RuleBasedStateMachine]:
    class BatchStates(RuleBasedStateMachine):
        @initialize(size=st.integers(1, 9), refused=st.sets(st.integers(0, 8), max_size=3))
        def start(self, size, refused):
            self.custom_ids = [f"doc-{n}" for n in range(size)]
            lines = [
                line(cid) if n not in refused else json.dumps({"custom_id": cid, "body": 1})
                for n, cid in enumerate(self.custom_ids)
            ]
            file_id = upload(app, "\n".join(lines) + "\n").json()["id"]
            self.batch_id = create(app, file_id).json()["id"]
            self.ended_as = None

        def batch(self) -> Batch:
            return Batch.objects.get(pk=self.batch_id)

        @rule()
        def advance(self):
            batches.batches_advance()

        @rule()
        def a_worker_runs_a_sent_line(self):
            sent = GenerationJob.objects.filter(
                batch_line__batch_id=self.batch_id,
                status=GenerationJob.Status.QUEUED,
                enqueued_at__isnull=False,
            ).first()
            if sent is not None:
                job_run(job_id=sent.pk)
                batches.job_ended(sent.pk)

        @rule()
        def cancel(self):
            answer = app.api.post(f"/v1/batches/{self.batch_id}/cancel")
            assert answer.status_code in (200, 409), answer.content

        @rule()
        def the_window_passes(self):
            Batch.objects.filter(pk=self.batch_id).update(
                expires_at=timezone.now() - dt.timedelta(seconds=1)
            )

        @rule()
        def a_call_of_the_matter_is_queued_and_then_run(self):
            job, _ = job_submit(matter=app.key.matter, api_key=app.key, **INTERACTIVE)
            batches.batches_advance()  # the feeder holds the matter's lines meanwhile
            job_run(job_id=job.pk)
            batches.job_ended(job.pk)

        @invariant()
        def the_status_is_known_and_an_end_is_final(self):
            status = self.batch().status
            assert status in STATUSES
            if self.ended_as is not None:
                assert status == self.ended_as, "an ended batch changed"
            elif status in ENDED:
                self.ended_as = status

        def teardown(self):
            for _ in range(40):  # drive it to its end, as beat and the workers would
                if self.batch().status in ENDED:
                    break
                if self.batch().status != Batch.Status.VALIDATING:
                    self.a_worker_runs_a_sent_line()
                batches.batches_advance()
            batch = app.api.get(f"/v1/batches/{self.batch_id}").json()
            assert batch["status"] in ENDED, batch
            answered = content(app, batch["output_file_id"]) if batch["output_file_id"] else []
            refused = content(app, batch["error_file_id"]) if batch["error_file_id"] else []
            seen = [row["custom_id"] for row in answered + refused]
            assert sorted(seen) == sorted(self.custom_ids), (batch["status"], seen)
            counts = batch["request_counts"]
            assert counts["completed"] == len(answered)
            assert counts["total"] <= len(self.custom_ids)

    return BatchStates


def test_every_order_of_events_ends_the_batch_with_every_line_accounted_for(owner, monkeypatch):
    monkeypatch.setattr(batches, "_CHUNK", 2)  # a cancel or an expiry can land mid-validation
    machine = fuzzed_batches(owner)
    machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=8,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    machine.TestCase().runTest()
