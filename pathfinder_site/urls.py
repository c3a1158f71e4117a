from django.contrib import admin
from django.urls import include, path

from decoding.api.views import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("decoding.api.urls")),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("portal/", include("reviewers.urls")),
]
