"""A standard transparency-log client follows the log over HTTP: tests/tlog_client is built from
the Go checksum database's own packages (golang.org/x/mod/sumdb/note and tlog, Debian's
golang-golang-x-mod-dev), with none of Pathfinder's code. It checks the checkpoint's signature
with the pinned key, every tile it reads against the signed root, a leaf's inclusion and the
consistency of an earlier checkpoint.

The HTTP server is the standard library's, answering each request through Django's whole stack
(middleware, URLs, views) on the test's own database connection; gunicorn is not in the loop
because the test's data lives in a transaction only this thread sees (the audit tables refuse
the TRUNCATE a live-server test would need)."""

import http.server
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from django.test import Client

from audit.log import checkpoint_create
from audit.models import LedgerEntry

from .test_log_tiles import sealed

CLIENT_SOURCE = Path(__file__).resolve().parents[1] / "tlog_client"
GOPATH = "/usr/share/gocode"


@pytest.fixture(scope="session")
def tlog_client(tmp_path_factory) -> Path:
    if shutil.which("go") is None or not Path(GOPATH, "src/golang.org/x/mod/sumdb/tlog").is_dir():
        pytest.fail(
            "the log-client test needs Go and golang.org/x/mod "
            "(apt-get install golang-go golang-golang-x-mod-dev; .ci/run does)"
        )
    out = tmp_path_factory.mktemp("go") / "tlog_client"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": GOPATH,
        "GOCACHE": str(out.parent / "cache"),
        "GOFLAGS": "",
    }
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=CLIENT_SOURCE, env=env, check=True)
    return out


class _Relay(http.server.BaseHTTPRequestHandler):
    """Answers a GET through Django's test client, in the thread that holds the test's data."""

    def do_GET(self):
        response = Client().get(self.path)
        self.send_response(response.status_code)
        for header in ("Content-Type", "Cache-Control"):
            if header in response:
                self.send_header(header, response[header])
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)

    def log_message(self, *args):
        pass


def follow(client: Path, verifier: str, *args) -> subprocess.CompletedProcess:
    with http.server.HTTPServer(("127.0.0.1", 0), _Relay) as server:
        server.timeout = 0.05
        url = f"http://127.0.0.1:{server.server_address[1]}/log"
        process = subprocess.Popen(
            [str(client), url, verifier, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            server.handle_request()
        stdout, stderr = process.communicate(timeout=5)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.django_db
def test_the_go_checksum_database_client_follows_the_log(tlog_client, signing_host):
    sealed(300)
    first = checkpoint_create()
    sealed(70)
    latest = checkpoint_create()
    entry = LedgerEntry.objects.get(seq=299)
    result = follow(tlog_client, signing_host.verifier, 299, first.tree_size)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(f"OK 370 {latest.note.splitlines()[2]} ")
    assert entry.payload in result.stdout  # the leaf it proved is the ledger entry
    assert f"old 300 {first.note.splitlines()[2]}" in result.stdout

    # Another log's key is refused; so is a leaf the checkpoint does not cover.
    _, other = __import__("audit.evidence.checkpoints", fromlist=["x"]).generate_signing_key(
        "other.example/log"
    )
    refused = follow(tlog_client, other, 0)
    assert refused.returncode == 1 and "checkpoint" in refused.stderr
    beyond = follow(tlog_client, signing_host.verifier, 370)
    assert beyond.returncode == 1
