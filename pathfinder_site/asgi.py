import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")
application = get_asgi_application()

from pathfinder_site.checks import refuse_development_secret  # noqa: E402 - needs settings

refuse_development_secret()
