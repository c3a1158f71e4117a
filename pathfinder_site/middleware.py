"""Reject an oversized body with 413 before anything reads it; send a person who has not given
their one-time password yet (PATHFINDER_REQUIRE_MFA) to give it."""

from urllib.parse import urlencode

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import redirect
from django.urls import reverse

from decoding.protocol.openai_errors import openai_error_body

# What multipart framing and the `purpose` field may add to an uploaded file.
UPLOAD_FRAMING_BYTES = 1 << 20


class BodySizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.PATHFINDER_MAX_BODY_BYTES
        if request.method == "POST" and request.path.rstrip("/") == "/v1/files":
            # A batch input file, which decoding.batches holds to its own limit.
            limit = settings.PATHFINDER_BATCH_MAX_FILE_BYTES + UPLOAD_FRAMING_BYTES
        if length > limit:
            message = f"body: request body is {length} bytes; the limit is {limit}."
            if request.path.startswith("/v1/"):  # each API's own error shape
                body = openai_error_body(413, message, "body", "payload_too_large")
            else:
                body = {"error": {"status": 413, "code": "payload_too_large", "field": "body",
                                  "message": message}}  # fmt: skip
            return JsonResponse(body, status=413)
        return self.get_response(request)


class RequireMFAMiddleware:
    """With PATHFINDER_REQUIRE_MFA on, a signed-in person reaches the portal and the admin only
    once verified by a one-time password this session (django-otp's OTPMiddleware says so);
    until then every such page redirects to /accounts/mfa/. API keys are not sessions: the
    APIs are unaffected."""

    GUARDED = ("/portal/", "/admin/")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if (
            settings.PATHFINDER_REQUIRE_MFA
            and user is not None
            and user.is_authenticated
            and not user.is_verified()
            and request.path.startswith(self.GUARDED)
            and not request.path.startswith("/admin/logout/")
        ):
            return redirect(f"{reverse('mfa')}?{urlencode({'next': request.get_full_path()})}")
        return self.get_response(request)
