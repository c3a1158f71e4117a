"""Bearer API keys: machines authenticate as a key, which belongs to one matter."""

from dataclasses import dataclass

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from decoding.models import ApiKey


@dataclass(frozen=True)
class ApiClient:
    """request.user for an API call: the application holding the key."""

    api_key: ApiKey
    is_authenticated: bool = True


UNUSABLE_KEY = "authorization: invalid, revoked or expired API key."


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw_key = header.partition(" ")
        if scheme.lower() != "bearer" or not raw_key.strip():
            raise exceptions.AuthenticationFailed("authorization: expected 'Bearer <API key>'.")
        api_key = (
            ApiKey.objects.select_related("matter")
            .filter(key_hash=ApiKey.digest(raw_key.strip()), revoked_at__isnull=True)
            .first()
        )
        # One answer for a key that is unknown, revoked or expired: which it is is the key
        # holder's to learn from the operator, not any caller's.
        if api_key is None or api_key.is_expired(timezone.now()):
            raise exceptions.AuthenticationFailed(UNUSABLE_KEY)
        return ApiClient(api_key), api_key

    def authenticate_header(self, request):
        # Its presence makes DRF answer 401 rather than 403 to an unauthenticated call.
        return 'Bearer realm="pathfinder"'


class HasApiKey(BasePermission):
    """An API key holding the view's scope: "generate" for writes, else "read" (a view may name
    its own in `required_scope`)."""

    def has_permission(self, request, view):
        if not isinstance(request.auth, ApiKey):
            return False
        read = request.method in ("GET", "HEAD", "OPTIONS")
        default = ApiKey.Scope.READ if read else ApiKey.Scope.GENERATE
        scope = str(getattr(view, "required_scope", None) or default)
        if scope not in request.auth.scopes:
            self.message = f"authorization: this API key lacks the {scope!r} scope."
            return False
        return True
