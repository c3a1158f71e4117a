"""What a worker keeps between jobs stays behind the matter's wall, and its stores hold up under
the worker's threads. The attacks on a running service are tests/system/test_walls.py's; the
model-level walls (slots, saved prompts, live caches) tests/models/test_walls.py's."""

from __future__ import annotations

import sys
import threading

import pytest

from decoding.engine import PromptLookupDrafter, StubProvider
from decoding.worker import references, runtime


@pytest.fixture
def empty_store():
    references.forget_all()
    yield
    references.forget_all()


def test_one_matters_references_are_never_another_matters(empty_store):
    references.remember(1, "a-job", [5, 6, 7])
    references.remember(2, "b-job", [8, 9])
    assert [r.name for r in references.references_for(2)] == ["b-job"]
    assert [r.name for r in references.references_for(1)] == ["a-job"]
    assert references.references_for(3) == []


def test_the_reference_store_is_read_while_other_jobs_end_and_evict(empty_store, settings):
    """A batching worker's jobs end (remember, evicting) while others start (references_for):
    unguarded, the reader's iteration saw the store change under it ("OrderedDict mutated
    during iteration")."""
    settings.PATHFINDER_DRAFT_REFERENCE_TOKENS = 500  # ten jobs' worth: every end evicts
    for n in range(10):
        references.remember(n % 2, f"job-{n}", range(50))
    stop, errors = threading.Event(), []

    def ending():
        n = 10
        while not stop.is_set():
            references.remember(n % 2, f"job-{n}", range(50))
            n += 1

    def starting():
        try:
            for _ in range(3000):
                assert all(len(r.tokens) == 50 for r in references.references_for(1))
        except Exception as exc:  # noqa: BLE001 - any error is the finding
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        writer = threading.Thread(target=ending)
        readers = [threading.Thread(target=starting) for _ in range(3)]
        for thread in [writer, *readers]:
            thread.start()
        for thread in readers:
            thread.join()
        stop.set()
        writer.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_what_copied_drafts_taught_the_schedule_is_kept_per_matter():
    """Acceptance by match length sets a later job's draft lengths, which its records show: one
    matter's jobs learn from their own matter's drafts, never from another's text."""
    target = StubProvider()
    models = runtime.LoadedModels(
        "probe",
        drafter=PromptLookupDrafter(target.vocab_size),
        target=target,
        tokenizer=None,
        verify_cost={1: 0.010, 2: 0.011, 4: 0.012, 8: 0.014},
    )
    first_a = models.schedule(8, target, wall=1)
    assert models.schedule(8, target, wall=1).statistics is first_a.statistics
    assert models.schedule(8, target, wall=2).statistics is not first_a.statistics
