"""The global log, read-only, as c2sp.org/tlog-tiles serves it: /log/checkpoint, /log/tile/…
and /log/tile/entries/…, so transparency-log clients, witnesses and auditors can follow it
with their own code. Public and unauthenticated like any transparency log: a leaf names a
trail, its job, its record count, head hash and outcome, never a prompt or an answer.

Only what the newest valid checkpoint covers is served: a tile or bundle beyond it is a 404.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from . import examiner_package
from .evidence.tile_math import WIDTH, LogIncomplete, parse_tile_path
from .keys import shown_verifier_keys
from .log import latest_checkpoint, log_size
from .tiles import Tiles

# Full tiles never change; the checkpoint does, every interval (the spec: a few seconds).
_IMMUTABLE = "public, max-age=31536000, immutable"
_CHECKPOINT_CACHE = "public, max-age=5"


def _not_found(message: str) -> HttpResponse:
    return HttpResponse(f"{message}\n", status=404, content_type="text/plain; charset=utf-8")


@require_GET
def checkpoint(request):
    latest = latest_checkpoint(log_size())
    if latest is None:
        return _not_found("no checkpoint has been signed yet")
    response = HttpResponse(latest.note, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = _CHECKPOINT_CACHE
    return response


@require_GET
def tile(request, path: str):
    try:
        level, index, width = parse_tile_path(path)
    except ValueError as exc:
        return _not_found(str(exc))
    latest = latest_checkpoint(log_size())
    covered = latest.tree_size if latest is not None else 0
    span = WIDTH ** (level or 0)
    # The tree whose rightmost tile of this level this is: a partial tile is served for the
    # size that makes it (the same bytes for every size up to the next leaf of its level).
    size = (index * WIDTH + width) * span
    if size > covered:
        return _not_found(f"{request.path}: beyond the newest checkpoint ({covered} leaves)")
    try:
        tree = Tiles(size)
        body = tree.entries(index) if level is None else tree.tile(level, index)
    except LogIncomplete as exc:
        return _not_found(str(exc))
    response = HttpResponse(body, content_type="application/octet-stream")
    response["Cache-Control"] = _IMMUTABLE
    return response


@require_GET
def examiner(request):
    """/examiner/: what an examiner needs from the operator, in plain text: the examiner's
    package (its file and SHA-256, downloadable beside this) and the log's verifier key(s)."""
    wheel = examiner_package.wheel()
    keys = "\n".join(shown_verifier_keys()) or "(no log key is configured on this host)"
    body = (
        f"pathfinder-verify {examiner_package.version()}: verify Pathfinder evidence bundles "
        "offline (docs/examiner-package.md)\n"
        f"wheel: {request.build_absolute_uri(wheel.filename)}\n"
        f"sha256: {wheel.sha256}\n"
        f"log verifier key(s), to compare with the copy you obtained out of band:\n{keys}\n"
    )
    return HttpResponse(body, content_type="text/plain; charset=utf-8")


@require_GET
def examiner_wheel(request, filename: str):
    wheel = examiner_package.wheel()
    if filename != wheel.filename:
        return _not_found(f"this host serves {wheel.filename}")
    response = HttpResponse(wheel.data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{wheel.filename}"'
    response["X-Content-SHA256"] = wheel.sha256
    return response
