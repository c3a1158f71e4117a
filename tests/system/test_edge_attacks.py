"""The edge under the outside check's attacks (issue 41, item 1), side by side: Pathfinder's front
(pathfinder_site.front) and nginx from Debian running deploy/nginx/pathfinder.conf as shipped,
each before one gunicorn web process (gunicorn.conf.py). Each attack is made on both and each
must hold on both:

- four keyless 100 MiB uploads get 401 from the headers, with every process under 300 MiB;
- a body over the API's limit (1 MiB) gets 413, whether its length is told or counted: an
  answer, not a reset connection;
- forty clients that stall while downloading a 20 MB file leave /healthz answering within 2 s,
  gunicorn under 300 MiB, and are cut within 90 s;
- chunk sizes and heads nginx refuses are refused (400);
- a client's X-Forwarded-Proto never reaches gunicorn: the examiner page's links stay http.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import socket
import time
from pathlib import Path

import pytest
import requests

from deploy.nginx import local as nginx

from .helpers import (
    RssWatch,
    Stack,
    auth,
    batch_file_of,
    free_port,
    last_line,
    received_until_closed,
    stalled_download,
    start_process,
    start_web_and_front,
    stop_all,
    wait_until_healthy,
)

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (.ci/run)"),
]

MIB = 1 << 20
RSS_LIMIT = 300 * MIB
EDGES = ("front", "nginx")


@pytest.fixture(scope="module")
def edges(postgres_stack: Stack, tmp_path_factory):
    """One gunicorn and both edges before it: {"front": url, "nginx": url, "pids": {...}}."""
    workdir = tmp_path_factory.mktemp("edges")
    web, web_port, front, front_port = start_web_and_front("edge", postgres_stack.env, workdir)
    nginx_port = free_port()
    config = nginx.write_config(workdir / "nginx", nginx_port, web_port)
    edge = start_process("nginx", nginx.command(config), postgres_stack.env, workdir)
    processes = [web, front, edge]
    try:
        for port in (front_port, nginx_port):
            wait_until_healthy(f"http://127.0.0.1:{port}", processes)
        yield {
            "front": f"http://127.0.0.1:{front_port}",
            "nginx": f"http://127.0.0.1:{nginx_port}",
            "pids": {"gunicorn": web.popen.pid, "front": front.popen.pid, "nginx": edge.popen.pid},
        }
    finally:
        stop_all(processes)


def sparse_file(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize("edge", EDGES)
def test_keyless_uploads_are_refused_from_their_headers(edges, edge, tmp_path):
    body = sparse_file(tmp_path / "upload.bin", 100 * MIB)

    def upload(key: str | None):
        with open(body, "rb") as handle:  # streamed from disk with its Content-Length
            return requests.post(
                f"{edges[edge]}/v1/files",
                data=handle,
                headers={"Content-Type": "multipart/form-data; boundary=x", **auth(key or "")}
                if key
                else {"Content-Type": "multipart/form-data; boundary=x"},
                timeout=120,
            )

    with RssWatch(edges["pids"]) as watch, concurrent.futures.ThreadPoolExecutor(4) as pool:
        started = time.monotonic()
        answers = list(pool.map(upload, [None, None, None, "not-a-key"]))
        took = time.monotonic() - started
    assert [answer.status_code for answer in answers] == [401, 401, 401, 401], [
        answer.text[:200] for answer in answers
    ]
    assert answers[0].json()["error"]["param"] == "authorization"
    assert "authorization" in answers[3].json()["error"]["message"]
    for name, most in watch.most.items():
        assert most < RSS_LIMIT, f"{name} reached {most / MIB:.0f} MiB during {edge}'s uploads"
    assert took < 60


@pytest.mark.parametrize("edge", EDGES)
def test_each_api_hears_a_refusal_in_its_own_error_shape(edges, edge):
    native = requests.post(f"{edges[edge]}/api/v1/generations", json={"prompt": "x"}, timeout=30)
    assert native.status_code == 401
    assert native.json()["error"]["field"] == "authorization"  # the native API's shape
    keyed = {"Content-Type": "application/json", "Authorization": "Bearer k"}
    big = requests.post(
        f"{edges[edge]}/api/v1/generations", data=b"x" * (2 * MIB), timeout=30, headers=keyed
    )
    assert big.status_code == 413 and big.json()["error"]["field"] == "body"
    openai = requests.post(f"{edges[edge]}/v1/completions", json={"prompt": "x"}, timeout=30)
    assert openai.status_code == 401 and openai.json()["error"]["param"] == "authorization"


@pytest.fixture(scope="module")
def read_only_key(postgres_stack: Stack) -> str:
    made = postgres_stack.manage(
        "create_api_key", "--matter", "system-tests", "--scope", "read", "edge-read-only"
    )
    return last_line(made)


@pytest.mark.parametrize("edge", EDGES)
def test_a_key_that_may_not_upload_is_refused_before_its_body_and_one_that_may_passes(
    edges, edge, tmp_path, postgres_stack: Stack, read_only_key
):
    body = sparse_file(tmp_path / "upload.bin", 50 * MIB)
    with open(body, "rb") as handle:
        refused = requests.post(
            f"{edges[edge]}/v1/files", data=handle, timeout=120,
            headers={"Content-Type": "multipart/form-data; boundary=x", **auth(read_only_key)},
        )  # fmt: skip
    assert refused.status_code == 403, refused.text[:300]
    assert "scope" in refused.json()["error"]["message"]
    data = batch_file_of(2 * MIB)
    stored = requests.post(
        f"{edges[edge]}/v1/files", files={"file": ("ok.jsonl", data)}, data={"purpose": "batch"},
        headers=auth(postgres_stack.api_key), timeout=120,
    )  # fmt: skip
    assert stored.status_code == 200, stored.text[:300]
    assert stored.json()["bytes"] == len(data)


@pytest.mark.parametrize("edge", EDGES)
def test_a_body_too_large_is_answered_413_not_reset(edges, edge, postgres_stack: Stack):
    key = {"Content-Type": "application/json", **auth(postgres_stack.api_key)}
    url = f"{edges[edge]}/v1/completions"
    # Over the API's limit (1 MiB), by its Content-Length: the edge answers from the head.
    told = requests.post(url, data=b"x" * (4 * MIB), headers=key, timeout=60)
    assert told.status_code == 413, told.text[:300]
    assert told.json()["error"]["code"] == "payload_too_large"
    # Chunked, so only counting tells: the edge answers once it has counted past the limit.
    counted = requests.post(url, data=iter([b"x" * MIB] * 4), headers=key, timeout=60)
    assert counted.status_code == 413, counted.text[:300]
    # Within the limit, it reaches gunicorn, whose own check refuses it in the API's words.
    within = requests.post(url, data=b"{" * 1000, headers=key, timeout=60)
    assert within.status_code == 400 and "error" in within.json()


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\nab",
        b"GET /healthz HTTP/1.1\r\nAccept: */*\r\n\r\n",
    ],
    ids=["chunk-minus-1", "chunk-0x2", "chunk-plus-2", "no-host"],
)
@pytest.mark.parametrize("edge", EDGES)
def test_syntax_nginx_refuses_is_refused(edges, edge, raw, postgres_stack: Stack):
    port = int(edges[edge].rsplit(":", 1)[1])
    keyed = raw.replace(
        b"Host: x\r\n", f"Host: x\r\nAuthorization: Bearer {postgres_stack.api_key}\r\n".encode()
    )
    with socket.create_connection(("127.0.0.1", port), timeout=15) as connection:
        connection.sendall(keyed)
        answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


@pytest.mark.parametrize("edge", EDGES)
def test_a_clients_scheme_claim_never_reaches_gunicorn(edges, edge):
    page = requests.get(
        f"{edges[edge]}/examiner/", headers={"X-Forwarded-Proto": "https"}, timeout=30
    )
    assert page.status_code == 200, page.text[:300]
    wheel_line = next(line for line in page.text.splitlines() if line.startswith("wheel: "))
    assert wheel_line.startswith("wheel: http://"), wheel_line


def test_stalled_downloads_leave_healthz_answering_and_are_cut(edges, postgres_stack: Stack):
    key = postgres_stack.api_key
    data = batch_file_of(20 * MIB)
    uploaded = requests.post(
        f"{edges['front']}/v1/files", files={"file": ("big.jsonl", data)},
        data={"purpose": "batch"}, headers=auth(key), timeout=120,
    )  # fmt: skip
    assert uploaded.status_code == 200, uploaded.text[:300]
    path = f"/v1/files/{uploaded.json()['id']}/content"
    whole = requests.get(f"{edges['nginx']}{path}", headers=auth(key), timeout=120)
    assert whole.content == data  # streamed, whole
    started = time.monotonic()
    stalled = {
        edge: [stalled_download(int(edges[edge].rsplit(":", 1)[1]), path, key) for _ in range(40)]
        for edge in EDGES
    }
    with RssWatch({"gunicorn": edges["pids"]["gunicorn"]}) as watch:
        time.sleep(5)  # every download has begun; none is read
        for edge in EDGES:
            asked = time.monotonic()
            health = requests.get(f"{edges[edge]}/healthz", timeout=10)
            assert health.status_code == 200
            assert time.monotonic() - asked < 2, f"/healthz through {edge} took too long"
    assert watch.most["gunicorn"] < RSS_LIMIT, (
        f"gunicorn reached {watch.most['gunicorn'] / MIB} MiB"
    )
    time.sleep(max(0.0, 90 - (time.monotonic() - started)))
    for edge, connections in stalled.items():
        got = [received_until_closed(connection, len(data)) for connection in connections]
        assert max(got) < len(data), f"{edge} never cut a stalled download: {got}"
