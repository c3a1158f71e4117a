"""The native REST API: one APIView per endpoint; logic lives in services and selectors."""

from django.http import JsonResponse
from django.urls import reverse
from django.views.defaults import page_not_found
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from decoding import selectors, services
from decoding.protocol.errors import destroyed_response, error_response
from decoding.protocol.native_input import GenerationInput

from .pagination import JobPagination, RecordPagination
from .schema import GenerationOut, GenerationPageOut, TrailPageOut, errors
from .serializers import DecisionRecordOutput, GenerationFilter, GenerationOutput


def not_found(request, exception=None):
    """Django's 404 (no URL matched, e.g. a job id that is not a UUID) as each API's error body;
    HTML elsewhere."""
    message = f"{request.path}: no such endpoint or object."
    if request.path.startswith("/v1/"):
        error = {"message": message, "type": "not_found_error", "param": None, "code": "not_found"}
        return JsonResponse({"error": error}, status=404)
    if request.path.startswith("/api/"):
        error = {"status": 404, "code": "not_found", "field": None, "message": message}
        return JsonResponse({"error": error}, status=404)
    return page_not_found(request, exception)


PAGE_PARAMETERS = [
    OpenApiParameter("cursor", OpenApiTypes.STR, description="From a page's next/previous URL"),
    OpenApiParameter("limit", OpenApiTypes.INT, description="Page size"),
]


class GenerationListCreate(APIView):
    @extend_schema(
        operation_id="generations_list",
        summary="List the matter's generation jobs, newest first",
        parameters=[GenerationFilter, *PAGE_PARAMETERS],
        responses={200: GenerationPageOut, **errors(400, 401, 403, 429)},
    )
    def get(self, request):
        filters = GenerationFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        jobs = selectors.jobs_for_key(api_key=request.auth, **filters.validated_data)
        paginator = JobPagination()
        page = paginator.paginate_queryset(jobs, request, view=self)
        page = selectors.jobs_with_trails(page)
        return paginator.get_paginated_response([GenerationOutput(job).data for job in page])

    @extend_schema(
        operation_id="generations_create",
        summary="Queue a generation job",
        description="202 with the new job; 200 with the existing job when `request_id` was "
        "already used under this key.",
        request=GenerationInput,
        responses={
            202: GenerationOut,
            200: GenerationOut,
            **errors(400, 401, 403, 413, 415, 429, 503),
        },
    )
    def post(self, request):
        data = GenerationInput(data=request.data)
        data.is_valid(raise_exception=True)
        job, created = services.job_submit(
            matter=request.auth.matter, api_key=request.auth, **data.validated_data
        )
        body = GenerationOutput(job).data
        location = reverse("generation-detail", args=[job.id])
        code = status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        return Response(body, status=code, headers={"Location": location})


class GenerationDetail(APIView):
    @extend_schema(
        operation_id="generations_retrieve",
        summary="A job: status, output, timings, speculation metrics, trail",
        description="410 when the job's texts were destroyed under an order (the message "
        "says when and under what); its trail's records stay readable.",
        responses={200: GenerationOut, **errors(401, 403, 404, 410, 429)},
    )
    def get(self, request, job_id):
        job = selectors.job_get_for_key(api_key=request.auth, job_id=job_id)
        if job.destroyed_at is not None:
            return destroyed_response(job)
        return Response(GenerationOutput(job).data)


class GenerationCancel(APIView):
    @extend_schema(
        operation_id="generations_cancel",
        summary="Cancel a job at its next step boundary",
        description="A queued job never runs; a running one stops at its next step boundary, "
        "keeps what was recorded and its trail is sealed as cancelled.",
        request=None,
        responses={202: GenerationOut, **errors(401, 403, 404, 409, 429)},
    )
    def post(self, request, job_id):
        job = selectors.job_get_for_key(api_key=request.auth, job_id=job_id)
        try:
            job = services.job_cancel(job=job)
        except services.JobFinished as exc:
            return error_response(status.HTTP_409_CONFLICT, "job_finished", "id", f"id: {exc}.")
        return Response(GenerationOutput(job).data, status=status.HTTP_202_ACCEPTED)


class GenerationTrail(APIView):
    @extend_schema(
        operation_id="generations_trail",
        summary="A job's decision records, in order",
        parameters=PAGE_PARAMETERS,
        responses={200: TrailPageOut, **errors(401, 403, 404, 429)},
    )
    def get(self, request, job_id):
        job = selectors.job_get_for_key(api_key=request.auth, job_id=job_id)
        paginator = RecordPagination()
        page = paginator.paginate_queryset(selectors.trail_records(job), request, view=self)
        return paginator.get_paginated_response(
            [DecisionRecordOutput(record).data for record in page]
        )
