from django.urls import path

from . import views

urlpatterns = [
    path("generations", views.GenerationListCreate.as_view(), name="generation-list"),
    path("generations/<uuid:job_id>", views.GenerationDetail.as_view(), name="generation-detail"),
    path(
        "generations/<uuid:job_id>/cancel",
        views.GenerationCancel.as_view(),
        name="generation-cancel",
    ),
    path(
        "generations/<uuid:job_id>/trail", views.GenerationTrail.as_view(), name="generation-trail"
    ),
]
