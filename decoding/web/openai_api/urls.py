from django.urls import path

from decoding.web import converters  # noqa: F401  (registers <objectid:>)

from . import batch_views, views

urlpatterns = [
    path("models", views.ModelList.as_view(), name="openai-models"),
    path("completions", views.Completions.as_view(), name="openai-completions"),
    path("chat/completions", views.ChatCompletions.as_view(), name="openai-chat-completions"),
    path("files", batch_views.FileList.as_view(), name="openai-files"),
    path("files/<objectid:file_id>", batch_views.FileDetail.as_view(), name="openai-file"),
    path(
        "files/<objectid:file_id>/content",
        batch_views.FileContent.as_view(),
        name="openai-file-content",
    ),
    path("batches", batch_views.BatchList.as_view(), name="openai-batches"),
    path("batches/<objectid:batch_id>", batch_views.BatchDetail.as_view(), name="openai-batch"),
    path(
        "batches/<objectid:batch_id>/cancel",
        batch_views.BatchCancel.as_view(),
        name="openai-batch-cancel",
    ),
]
