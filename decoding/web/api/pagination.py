"""Cursor pagination for the native API. A cursor that does not decode is the caller's mistake:
400 naming `cursor`, not DRF's 404."""

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination


class _Cursor(CursorPagination):
    page_size_query_param = "limit"

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except NotFound as exc:
            raise ValidationError({"cursor": ["Invalid cursor."]}) from exc


class JobPagination(_Cursor):
    ordering = "-created_at"
    page_size = 50
    max_page_size = 500


class RecordPagination(_Cursor):
    ordering = "seq"
    page_size = 100
    max_page_size = 1000
