from django.apps import AppConfig


class PathfinderSiteConfig(AppConfig):
    """The deployment itself, as an app: its checks (`manage.py check --deploy`) and the
    commands that bring a machine up (`bootstrap_local`, `serve`). The apps never import it;
    they reach the Celery application as celery.current_app."""

    name = "pathfinder_site"
    verbose_name = "Pathfinder deployment"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the deployment checks
