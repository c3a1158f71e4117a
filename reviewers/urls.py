"""The portal's URLs, mounted at /portal/."""

from django.urls import path

from decoding.web import converters  # noqa: F401  (registers <objectid:>)

from . import views

app_name = "reviewers"

urlpatterns = [
    path("", views.trail_list, name="trails"),
    path("jobs/<uuid:job_id>/", views.job_walk, name="job"),
    path("jobs/<uuid:job_id>/step", views.job_step, name="step"),
    path("jobs/<uuid:job_id>/verify", views.job_verify, name="verify"),
    path("jobs/<uuid:job_id>/replay", views.job_replay, name="replay_start"),
    path("jobs/<uuid:job_id>/export", views.job_export, name="export"),
    path("jobs/<uuid:job_id>/receipt", views.job_receipt, name="receipt"),
    path("jobs/<uuid:job_id>/annotations", views.job_annotate, name="annotate"),
    path("jobs/<uuid:job_id>/sign-off", views.job_sign_off, name="sign_off"),
    path("replays/<uuid:replay_id>", views.replay_status, name="replay"),
    path("matters/export", views.matter_export, name="matter_export"),
    path("batches/", views.batch_list, name="batches"),
    path("batches/<objectid:batch_id>/", views.batch_detail, name="batch"),
    path("batches/<objectid:batch_id>/export", views.batch_export, name="batch_export"),
    path("verify", views.bundle_verify, name="verify_bundle"),
    path("custody/", views.custody_log, name="custody"),
]
