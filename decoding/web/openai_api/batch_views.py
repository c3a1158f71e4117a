"""/v1/files and /v1/batches: OpenAI's Files and Batch APIs over a key's matter.

    POST /v1/files                   upload a batch input (multipart: file, purpose=batch)
    GET  /v1/files[/{id}[/content]]  list, retrieve, download (inputs, outputs, errors)
    DELETE /v1/files/{id}            delete a file no batch names
    GET  /edge/upload-authorization  may this key upload? (the edge asks before reading a body)
    POST /v1/batches                 create a batch over an uploaded file
    GET  /v1/batches[/{id}]          list (cursor: after, limit), retrieve
    POST /v1/batches/{id}/cancel     cancel

The work is decoding.batches'; this shapes requests and answers.
"""

from __future__ import annotations

from django.http import Http404, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from decoding import batch_files, batches
from decoding.job_input import InvalidInput
from decoding.models import ApiKey, Batch, BatchFile
from decoding.protocol.batch_shapes import batch_object, file_object
from decoding.protocol.declared import as_declared
from decoding.protocol.fields import RefusesUnknownFields, StrictCharField
from decoding.protocol.openai_errors import openai_error
from decoding.protocol.openai_out import BatchOut, FileDeletedOut, FileOut, ListOut
from decoding.protocol.parsers import JSONParser
from decoding.storable import storable

from .schema import errors
from .views import OpenAIView

METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512  # OpenAI's limits


class FileUploadInput(RefusesUnknownFields, serializers.Serializer):
    file = serializers.FileField()
    purpose = StrictCharField(max_length=32)


class BatchCreateInput(RefusesUnknownFields, serializers.Serializer):
    unknown_field_message = "Unsupported parameter: Pathfinder does not implement it."

    input_file_id = StrictCharField(max_length=64)
    endpoint = StrictCharField(max_length=64)
    completion_window = StrictCharField(max_length=16)
    metadata = serializers.DictField(
        child=StrictCharField(max_length=METADATA_VALUE_CHARS, allow_blank=True),
        required=False,
        allow_null=True,
    )

    def validate_metadata(self, value):
        if value and len(value) > METADATA_KEYS:
            raise serializers.ValidationError(f"At most {METADATA_KEYS} keys.")
        if value and any(len(key) > METADATA_KEY_CHARS for key in value):
            raise serializers.ValidationError(f"Keys are at most {METADATA_KEY_CHARS} characters.")
        if value and not all(storable(text) for pair in value.items() for text in pair):
            raise serializers.ValidationError(
                "Keys and values cannot hold a NUL character (U+0000) or an unpaired surrogate "
                "(U+D800 to U+DFFF)."
            )
        return value


class PageInput(RefusesUnknownFields, serializers.Serializer):
    unknown_field_message = "Unknown query parameter."

    after = StrictCharField(max_length=64, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=100, required=False, default=20)
    purpose = StrictCharField(max_length=32, required=False)


class FileTooLarge(exceptions.APIException):
    status_code = 413
    default_code = "payload_too_large"
    field = "file"


class StorageQuotaExceeded(exceptions.APIException):
    status_code = 413
    default_code = "storage_quota_exceeded"

    def __init__(self, exc: batches.StorageQuotaExceeded):
        super().__init__(str(exc))
        self.field = exc.field


class Conflict(exceptions.APIException):
    status_code = 409
    default_code = "conflict"


_PAGE = [
    OpenApiParameter("after", str, description="the last id of the page before"),
    OpenApiParameter("limit", int, description="1 to 100; 20 if left out"),
]


class FileList(OpenAIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        operation_id="files_create",
        summary="Upload a batch input file (JSONL, purpose=batch)",
        request={"multipart/form-data": FileUploadInput},
        responses={200: FileOut, **errors(400, 401, 403, 413, 415, 429)},
    )
    def post(self, request):
        data = FileUploadInput(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        try:
            stored = batches.file_upload(
                matter=request.auth.matter,
                api_key=request.auth,
                filename=upload.name or "",
                content=upload.chunks(),
                purpose=data.validated_data["purpose"],
            )
        except batches.FileTooLarge as exc:
            raise FileTooLarge(str(exc)) from exc
        except batches.StorageQuotaExceeded as exc:
            raise StorageQuotaExceeded(exc) from exc
        return Response(file_object(stored))

    @extend_schema(
        operation_id="files_list",
        summary="The matter's files, newest first",
        parameters=[*_PAGE, OpenApiParameter("purpose", str)],
        responses={200: ListOut, **errors(400, 401, 403, 429)},
    )
    def get(self, request):
        query = _page_input(request)
        files = BatchFile.objects.filter(matter=request.auth.matter)
        if query.get("purpose"):
            files = files.filter(purpose=query["purpose"])
        return Response(_page(files, query, file_object))


class UploadAuthorization(OpenAIView):
    """204 if the request's key may upload a file, else the 401 or 403 the upload would get.
    The edge (pathfinder_site.front, or nginx's auth_request) asks with an upload's headers
    before it reads the body, so a keyless 200 MB upload costs nothing. Not throttled: the
    upload that follows is."""

    required_scope = ApiKey.Scope.GENERATE
    throttle_classes: list = []

    @extend_schema(exclude=True)
    def get(self, request):
        return Response(status=204)


class FileDetail(OpenAIView):
    @extend_schema(
        operation_id="files_retrieve",
        summary="A file's description",
        responses={200: FileOut, **errors(401, 403, 404, 429)},
    )
    def get(self, request, file_id: str):
        return Response(file_object(_file(request, file_id)))

    @extend_schema(
        operation_id="files_delete",
        summary="Delete a file no batch names (a batch's files are kept with it: 409)",
        responses={200: FileDeletedOut, **errors(401, 403, 404, 409, 429)},
    )
    def delete(self, request, file_id: str):
        stored = _file(request, file_id)
        try:
            batches.file_delete(stored=stored)
        except batches.FileInUse as exc:
            raise Conflict(f"file_id: {exc}.") from exc
        return Response(
            as_declared(FileDeletedOut, {"id": file_id, "object": "file", "deleted": True})
        )


class FileContent(OpenAIView):
    def perform_content_negotiation(self, request, force=False):
        # The body is the file's bytes whatever is asked (the openai client asks for
        # application/binary); errors still answer JSON.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        operation_id="files_content",
        summary="A file's bytes: an input as uploaded, or a batch's output or errors (JSONL)",
        responses={
            (200, "application/jsonl"): OpenApiTypes.BINARY,
            **errors(401, 403, 404, 410, 429),
        },
    )
    def get(self, request, file_id: str):
        stored = _file(request, file_id)
        if stored.destroyed_at is not None:
            return openai_error(
                410,
                f"file_id: the bytes of file {stored.pk} were destroyed on "
                f"{stored.destroyed_at:%Y-%m-%d} under {stored.destroyed_under!r}.",
                param="file_id",
                code="destroyed",
            )
        # Streamed a piece at a time: a 200 MB file never sits whole in a web process.
        response = StreamingHttpResponse(
            batch_files.pieces(stored), content_type="application/jsonl"
        )
        response["Content-Length"] = str(stored.bytes)
        # RFC 6266/5987: a quote or a non-Latin-1 name is escaped or given as filename*.
        response["Content-Disposition"] = content_disposition_header(True, stored.filename)
        return response


class BatchList(OpenAIView):
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="batches_create",
        summary="Run every line of an uploaded file as a job with its own trail",
        request=BatchCreateInput,
        responses={200: BatchOut, **errors(400, 401, 403, 413, 415, 429)},
    )
    def post(self, request):
        data = BatchCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            batch = batches.batch_create(
                matter=request.auth.matter, api_key=request.auth, **data.validated_data
            )
        except batches.StorageQuotaExceeded as exc:
            raise StorageQuotaExceeded(exc) from exc
        return Response(batch_object(batch, batches.request_counts(batch)))

    @extend_schema(
        operation_id="batches_list",
        summary="The matter's batches, newest first",
        parameters=_PAGE,
        responses={200: ListOut, **errors(400, 401, 403, 429)},
    )
    def get(self, request):
        query = _page_input(request)
        if query.get("purpose"):
            raise InvalidInput("purpose", "Only files are listed by purpose.")
        found = Batch.objects.filter(matter=request.auth.matter)
        return Response(
            _page(found, query, lambda batch: batch_object(batch, batches.request_counts(batch)))
        )


class BatchDetail(OpenAIView):
    @extend_schema(
        operation_id="batches_retrieve",
        summary="A batch, with its request_counts and, once it ended, its files",
        responses={200: BatchOut, **errors(401, 403, 404, 429)},
    )
    def get(self, request, batch_id: str):
        batch = get_object_or_404(Batch, pk=batch_id, matter=request.auth.matter)
        return Response(batch_object(batch, batches.request_counts(batch)))


class BatchCancel(OpenAIView):
    @extend_schema(
        operation_id="batches_cancel",
        summary="Cancel a batch: queued lines never run, running ones stop at their next step",
        request=None,
        responses={200: BatchOut, **errors(401, 403, 404, 409, 429)},
    )
    def post(self, request, batch_id: str):
        batch = get_object_or_404(Batch, pk=batch_id, matter=request.auth.matter)
        try:
            batch = batches.batch_cancel(batch=batch)
        except batches.BatchEnded as exc:
            raise Conflict(f"batch_id: {exc}; there is nothing to cancel.") from exc
        return Response(batch_object(batch, batches.request_counts(batch)))


def _file(request, file_id: str) -> BatchFile:
    found = BatchFile.objects.filter(matter=request.auth.matter, pk=file_id).first()
    if found is None:
        raise Http404
    return found


def _page_input(request) -> dict:
    query = PageInput(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    return query.validated_data


def _page(rows, query: dict, shape) -> dict:
    """OpenAI's list page: newest first, from after the `after` id, `limit` rows."""
    rows = rows.order_by("-created_at", "-pk")
    if query.get("after"):
        mark = rows.filter(pk=query["after"]).values("created_at", "pk").first()
        if mark is None:
            raise InvalidInput("after", f"No {query['after']!r} here to list after.")
        rows = rows.filter(created_at__lte=mark["created_at"]).exclude(
            created_at=mark["created_at"], pk__gte=mark["pk"]
        )
    found = list(rows[: query["limit"] + 1])
    data = [shape(row) for row in found[: query["limit"]]]
    return as_declared(ListOut, {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(found) > query["limit"],
    })  # fmt: skip
