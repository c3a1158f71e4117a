"""/readyz names what is missing to the holder of the metrics token and only ready or not to
anyone else; /metrics reports the deployment's jobs and this process's counters in Prometheus'
text format, behind the token when one is set; both are computed once per interval however
often they are asked."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.log import checkpoint_create
from audit.verification import verify_everything
from decoding.engine.decoder import STEP_PARTS


def samples(text: str) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


TOKEN = "ops-token-for-tests"


@pytest.fixture
def ops(settings):
    settings.PATHFINDER_OPS_CACHE_S = 0
    settings.PATHFINDER_METRICS_TOKEN = TOKEN
    return {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}


def test_readyz_is_503_naming_the_missing_worker_and_reports_audit_upkeep(client, run_job, ops):
    # No Celery worker consumes this test process's queue (system-test workers use their own).
    run_job(max_tokens=3)
    verify_everything()
    checkpoint_create()
    public = client.get("/readyz")
    assert (public.status_code, public.json()) == (503, {"ready": False})  # no host, no error
    wrong = client.get("/readyz", HTTP_AUTHORIZATION="Bearer not-it")
    assert wrong.json() == {"ready": False}
    response = client.get("/readyz", **ops)
    assert response.status_code == 503
    body = response.json()
    checks = body["checks"]
    assert body["ready"] is False
    assert checks["database"]["ok"] and checks["migrations"] == {"ok": True, "pending": 0}
    assert checks["broker"]["ok"] is True
    assert checks["workers"] == {"ok": False, "count": 0, "names": [], "queue": "pathfinder"}
    assert checks["verification"]["last_run_ok"] is True
    assert 0 <= checks["verification"]["last_success_age_s"] < 60
    assert checks["checkpoint"]["tree_size"] >= 1 and checks["checkpoint"]["age_s"] < 60


def test_metrics_reports_jobs_by_status_and_speculation_counters(client, run_job, ops):
    assert client.get("/metrics").status_code == 401  # the token is set
    before = samples(client.get("/metrics", **ops).content.decode())
    job = run_job(max_tokens=40, draft_length=4)
    response = client.get("/metrics", **ops)
    assert response.status_code == 200
    after = samples(response.content.decode())
    assert after[("pathfinder_jobs", (("status", "succeeded"),))] >= 1

    def grew(name, labels=()):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert grew("pathfinder_decode_steps_total") == job.steps
    assert grew("pathfinder_drafted_tokens_total") == job.drafted
    assert grew("pathfinder_accepted_tokens_total") == job.accepted
    assert grew("pathfinder_position_drafted_total", (("position", "1"),)) > 0
    assert grew("pathfinder_jobs_finished_total", (("status", "succeeded"),)) == 1
    assert grew("pathfinder_audit_commit_seconds_count") >= 1
    # Every part of a step is timed, and the parts add up to no more than the decode itself.
    parts = {
        part: grew("pathfinder_step_part_seconds_total", (("part", part),)) for part in STEP_PARTS
    }
    assert all(parts[part] > 0 for part in ("model", "scores", "rule", "record", "audit")), parts
    assert sum(parts.values()) <= job.decode_ms / 1000 + 0.001
    assert any(name.startswith("django_http_requests") for name, _ in after)


def test_readiness_and_gauges_are_computed_once_per_interval(db, client, settings, monkeypatch):
    from pathfinder_site import health

    settings.PATHFINDER_OPS_CACHE_S = 60
    settings.PATHFINDER_METRICS_TOKEN = ""
    inspected = []
    real = health._workers
    monkeypatch.setattr(health, "_workers", lambda: inspected.append(1) or real())
    for _ in range(20):
        assert client.get("/readyz").status_code in (200, 503)
    assert len(inspected) <= 1  # at most one broker broadcast, not twenty
    assert client.get("/metrics").status_code == 200  # no token set: open, as before


def test_the_front_door_leads_to_the_reviewer_s_desk(client, db):
    """`/` was a bare 404: a person who opens the service's address gets the portal's login."""
    home = client.get("/")
    assert home.status_code == 302 and home["Location"] == "/portal/"
    landed = client.get("/", follow=True)
    assert landed.redirect_chain[-1][0].startswith("/accounts/login/")
    assert landed.status_code == 200
