"""The OpenAPI description of the OpenAI-compatible endpoints: their errors and the stream. The
bodies' declarations are decoding.protocol.openai_out's, which the writers are held to."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse

from decoding.protocol.openai_out import OpenAIErrorOut


def errors(*codes: int) -> dict:
    described = {
        400: "Invalid or unsupported parameter (named in `error.param`)",
        401: "Missing, invalid, expired or revoked API key",
        403: "The key lacks the scope this operation needs",
        404: "No such file or batch in this key's matter",
        409: "The batch already ended or is being cancelled",
        410: "The file's bytes were destroyed under an order (the message says when and under "
        "what)",
        413: "Request body (or batch input file) too large",
        415: "Not JSON",
        429: "Rate limit reached; retry after `Retry-After` seconds",
        500: "The generation failed (the job and its trail say why)",
        503: "Audit store or queue unavailable; nothing was released",
        504: "The job did not finish in time and was cancelled",
    }
    return {code: OpenApiResponse(OpenAIErrorOut, description=described[code]) for code in codes}


STREAM = OpenApiResponse(
    OpenApiTypes.STR,
    description="With `stream: true`: server-sent events, `data: <chunk JSON>` per chunk in "
    "OpenAI's format, then `data: [DONE]`. A chunk carries only tokens whose decision records "
    "are committed; the last one holds `finish_reason` and the `pathfinder` object.",
)
