import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")
application = get_wsgi_application()

from pathfinder_site.checks import refuse_development_secret  # noqa: E402 - needs settings

refuse_development_secret()
