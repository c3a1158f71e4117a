"""Reject an oversized body with 413 before anything reads it."""

from django.conf import settings
from django.http import JsonResponse


class BodySizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.PATHFINDER_MAX_BODY_BYTES
        if length > limit:
            return JsonResponse(
                {
                    "error": {
                        "code": "payload_too_large",
                        "field": "body",
                        "message": f"body: request body is {length} bytes; the limit is {limit}.",
                    }
                },
                status=413,
            )
        return self.get_response(request)
