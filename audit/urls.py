from django.urls import path, re_path

from . import views

app_name = "log"

urlpatterns = [
    path("checkpoint", views.checkpoint, name="checkpoint"),
    re_path(r"^(?P<path>tile/.+)$", views.tile, name="tile"),
]
