"""A worker process forgets a destroyed matter before its next job of it, even when no broadcast
reached it (a prefork pool's child, a worker that was busy or away): decoding.worker.forgetting
compares the matter's count of destructions with the one it last acted on."""

from types import SimpleNamespace

from decoding.worker import forgetting, references


def matter(pk: int, destructions: int) -> SimpleNamespace:
    return SimpleNamespace(pk=pk, destructions=destructions)


def test_a_process_forgets_a_matter_destroyed_since_its_last_job_of_it():
    references.forget_all()
    forgetting._known.clear()
    forgetting.catch_up(matter(1, 0))  # first sight: nothing of the matter is held yet
    forgetting.catch_up(matter(2, 0))
    references.remember(1, "job-a", [5, 6, 7, 8])
    references.remember(2, "job-b", [9, 9, 9, 9])
    forgetting.catch_up(matter(1, 0))  # no destruction since: kept
    assert [r.name for r in references.references_for(1)] == ["job-a"]
    forgetting.catch_up(matter(1, 1))  # destroyed meanwhile
    assert references.references_for(1) == []
    assert [r.name for r in references.references_for(2)] == ["job-b"]  # another matter's stay
    references.forget_all()
