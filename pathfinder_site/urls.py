from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from audit import views as log_views
from decoding.web.openai_api.batch_views import UploadAuthorization
from pathfinder_site import views as ops
from pathfinder_site.mfa import mfa

handler404 = "decoding.web.api.views.not_found"

urlpatterns = [
    # The front door leads to the reviewer's desk (its login first); machines use /api/ and /v1/.
    path("", RedirectView.as_view(pattern_name="reviewers:trails", permanent=False), name="home"),
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    path("api/v1/", include("decoding.web.api.urls")),
    path("v1/", include("decoding.web.openai_api.urls")),
    # The edge asks this with an upload's headers before it reads the body (docs/adr/0027).
    path(
        "edge/upload-authorization",
        UploadAuthorization.as_view(),
        name="edge-upload-authorization",
    ),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin/", admin.site.urls),
    path("accounts/mfa/", mfa, name="mfa"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("portal/", include("reviewers.urls")),
    path("log/", include("audit.urls")),
    # The examiner's package and the log's key, public like the log (docs/examiner-package.md).
    path("examiner/", log_views.examiner, name="examiner"),
    path("examiner/<str:filename>", log_views.examiner_wheel, name="examiner-wheel"),
]
