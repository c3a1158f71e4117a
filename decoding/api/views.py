"""The native REST API: one APIView per endpoint; logic lives in services and selectors."""

from django.http import JsonResponse
from django.urls import reverse
from rest_framework import status
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import APIView

import pathfinder_site
from decoding import selectors, services

from .serializers import DecisionRecordOutput, GenerationInput, GenerationOutput


def healthz(request):
    return JsonResponse({"status": "ok", "version": pathfinder_site.__version__})


class GenerationListCreate(APIView):
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
    def get(self, request, job_id):
        job = selectors.job_get_for_key(api_key=request.auth, job_id=job_id)
        return Response(GenerationOutput(job).data)


class RecordPagination(CursorPagination):
    ordering = "seq"
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000


class GenerationTrail(APIView):
    def get(self, request, job_id):
        job = selectors.job_get_for_key(api_key=request.auth, job_id=job_id)
        paginator = RecordPagination()
        page = paginator.paginate_queryset(selectors.trail_records(job), request, view=self)
        return paginator.get_paginated_response(
            [DecisionRecordOutput(record).data for record in page]
        )
