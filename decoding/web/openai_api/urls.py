from django.urls import path

from . import views

urlpatterns = [
    path("models", views.ModelList.as_view(), name="openai-models"),
    path("completions", views.Completions.as_view(), name="openai-completions"),
    path("chat/completions", views.ChatCompletions.as_view(), name="openai-chat-completions"),
]
