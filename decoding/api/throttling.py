"""Per-key rate limits, counted in the shared cache (Redis in production)."""

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from decoding.models import ApiKey


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
