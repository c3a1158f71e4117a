"""The native API's job list, cancel and per-request speculation metrics."""

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import Trail
from audit.selectors import trail_clear_decisions
from audit.verification import verify_trails
from decoding.models import GenerationJob
from decoding.worker import execution, leases


def test_the_list_holds_the_keys_matter_only_newest_first_and_filters(run_job, owner, outsider):
    done = [run_job(max_tokens=5) for _ in range(3)]
    queued = owner.api.post("/api/v1/generations", {"prompt_token_ids": [1]}, format="json")
    outsider.api.post("/api/v1/generations", {"prompt_token_ids": [1]}, format="json")

    listed = owner.api.get("/api/v1/generations").json()["results"]
    assert [j["id"] for j in listed] == [queued.json()["id"], *[str(j.id) for j in reversed(done)]]
    succeeded = owner.api.get("/api/v1/generations?status=succeeded").json()["results"]
    assert {j["id"] for j in succeeded} == {str(j.id) for j in done}
    later = (timezone.now() + dt.timedelta(minutes=1)).isoformat()
    assert owner.api.get("/api/v1/generations", {"created_after": later}).json()["results"] == []


def test_the_list_pages_with_a_cursor(run_job, owner):
    ids = {str(run_job(max_tokens=2).id) for _ in range(5)}
    seen, url = [], "/api/v1/generations?limit=2"
    while url:
        page = owner.api.get(url).json()
        assert len(page["results"]) <= 2
        seen += [j["id"] for j in page["results"]]
        url = page["next"]
    assert len(seen) == 5 and set(seen) == ids


def test_the_list_costs_the_same_queries_for_two_jobs_as_for_ten(run_job, owner):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def listed():
        with CaptureQueriesContext(connection) as queries:
            body = owner.api.get("/api/v1/generations?limit=50").json()
        return len(body["results"]), len(queries)

    for _ in range(2):
        run_job(max_tokens=3)
    two = listed()
    for _ in range(8):
        run_job(max_tokens=3)
    ten = listed()
    assert (two[0], ten[0]) == (2, 10)
    assert ten[1] == two[1]  # no query per row
    assert all(
        r["output_token_ids"] for r in owner.api.get("/api/v1/generations").json()["results"]
    )


@pytest.mark.parametrize("query", ["status=done", "created_after=yesterday", "colour=red"])
def test_a_bad_filter_is_a_400_naming_it(owner, query):
    response = owner.api.get(f"/api/v1/generations?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["field"] == query.split("=")[0]


def test_cancelling_a_queued_job_means_it_never_runs(owner):
    job = owner.api.post("/api/v1/generations", {"prompt_token_ids": [1]}, format="json").json()
    response = owner.api.post(f"/api/v1/generations/{job['id']}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"
    execution.job_run(job_id=job["id"])  # a worker that gets the message anyway
    row = GenerationJob.objects.get(pk=job["id"])
    assert (row.status, row.trail_id, row.output_token_ids) == ("cancelled", None, [])


def test_a_running_job_stops_at_a_step_boundary_and_seals_its_trail_cancelled(owner, monkeypatch):
    job = owner.api.post(
        "/api/v1/generations", {"prompt_token_ids": [1], "max_tokens": 500}, format="json"
    ).json()
    steps = []
    original = execution._step_boundary

    def cancel_after_three_steps(watch):
        asked = original(watch)

        def cancelled():
            steps.append(1)
            if len(steps) == 4:  # as a reviewer's cancel arriving mid-decode
                GenerationJob.objects.filter(pk=watch.job_id).update(
                    cancel_requested_at=timezone.now()
                )
            return asked()

        return cancelled

    monkeypatch.setattr(leases, "STEP_CHECK_S", 0)
    monkeypatch.setattr(execution, "_step_boundary", cancel_after_three_steps)
    execution.job_run(job_id=job["id"])

    row = GenerationJob.objects.get(pk=job["id"])
    assert (row.status, row.stop_reason, row.steps) == ("cancelled", "cancelled", 3)
    trail = Trail.objects.get(pk=row.trail_id)
    # The request, three decisions, and the answer as served.
    assert (trail.status, trail.outcome, trail.record_count) == ("sealed", "cancelled", 5)
    recorded = [
        t for payload in trail_clear_decisions(trail_id=trail.id) for t in payload["emitted"]
    ]
    assert row.output_token_ids == recorded
    assert verify_trails([trail.id], scope="test").ok
    again = owner.api.post(f"/api/v1/generations/{job['id']}/cancel")
    assert again.status_code == 202  # already cancelled: nothing to refuse


def test_a_finished_job_cannot_be_cancelled(run_job, owner):
    job = run_job(max_tokens=3)
    response = owner.api.post(f"/api/v1/generations/{job.id}/cancel")
    assert response.status_code == 409
    assert response.json()["error"]["field"] == "id"


def test_another_matters_job_is_404_for_read_cancel_and_trail(run_job, outsider):
    job = run_job(max_tokens=3)
    for response in (
        outsider.api.get(f"/api/v1/generations/{job.id}"),
        outsider.api.post(f"/api/v1/generations/{job.id}/cancel"),
        outsider.api.get(f"/api/v1/generations/{job.id}/trail"),
    ):
        assert response.status_code == 404
    assert GenerationJob.objects.get(pk=job.id).status == "succeeded"


def test_a_finished_job_reports_its_speculation_step_by_step(run_job, owner):
    job = run_job(max_tokens=60, temperature=0.8, draft_length=4)
    metrics = owner.api.get(f"/api/v1/generations/{job.id}").json()["metrics"]
    assert len(metrics["drafted_per_step"]) == len(metrics["accepted_per_step"]) == job.steps
    assert sum(metrics["drafted_per_step"]) == job.drafted
    assert sum(metrics["accepted_per_step"]) == job.accepted
    assert sum(metrics["accepted_length_histogram"]) == job.steps
    first = metrics["acceptance_by_position"][0]
    assert first["position"] == 1
    assert first["drafted"] == sum(1 for k in metrics["drafted_per_step"] if k >= 1)
    # Later positions are accepted only when every earlier one was: counts never grow.
    counts = [p["accepted"] for p in metrics["acceptance_by_position"]]
    assert counts == sorted(counts, reverse=True)
