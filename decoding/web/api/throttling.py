"""Per-key rate limits, counted in the shared cache (Redis in production)."""

import logging

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from decoding.models import ApiKey

logger = logging.getLogger(__name__)


class ApiKeyRateThrottle(SimpleRateThrottle):
    """PATHFINDER_RATE_LIMIT requests per API key; over it, 429 with Retry-After."""

    scope = "api_key"

    def get_rate(self):
        # Read per request, not at import, so the setting can change without a restart of tests.
        return settings.PATHFINDER_RATE_LIMIT

    def get_cache_key(self, request, view):
        if not isinstance(request.auth, ApiKey):
            return None  # unauthenticated requests are refused before they cost anything
        # The key digest, not the row id: ids repeat across databases sharing one cache.
        return self.cache_format % {"scope": self.scope, "ident": request.auth.key_hash[:32]}

    def allow_request(self, request, view):
        # The limit protects capacity; it must not take the API down with the cache. A cache
        # outage lets requests through (each still needs the database and the queue).
        try:
            return super().allow_request(request, view)
        except Exception as exc:
            logger.warning(
                "rate-limit cache unavailable; request allowed", extra={"error": str(exc)}
            )
            return True
