"""A real RFC 3161 time-stamping authority for tests: OpenSSL's own (`openssl ts -reply`),
behind a small HTTP front that hands it each query. Its root and TSA certificates are made here
with `openssl req`/`openssl x509`, the TSA's with the critical timeStamping usage RFC 3161 asks.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TS_CONFIG = """
[ tsa ]
default_tsa = tsa_config

[ tsa_config ]
dir = {dir}
serial = $dir/serial
signer_cert = $dir/tsa.crt
certs = $dir/tsa.crt
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.3.6.1.4.1.57264.2
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = no
tsa_name = no
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""

TSA_EXTENSIONS = """
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = critical, timeStamping
"""


def _openssl(*args: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["openssl", *args], cwd=cwd, input=stdin, capture_output=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr.decode()}")
    return done.stdout


class OpenSSLAuthority:
    """An OpenSSL TSA in `directory`; `root_pem` is what an examiner pins (--tsa-cert)."""

    def __init__(self, directory: Path):
        self.dir = directory
        d = str(directory)
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", "root.key", "-out", "root.crt", "-days", "30",
                 "-subj", "/CN=Pathfinder test TSA root", cwd=directory)  # fmt: skip
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", "tsa.key", "-out", "tsa.csr", "-subj", "/CN=Pathfinder test TSA",
                 cwd=directory)  # fmt: skip
        (directory / "tsa.ext").write_text(TSA_EXTENSIONS)
        _openssl("x509", "-req", "-in", "tsa.csr", "-CA", "root.crt", "-CAkey", "root.key",
                 "-CAcreateserial", "-out", "tsa.crt", "-days", "30", "-extfile", "tsa.ext",
                 cwd=directory)  # fmt: skip
        (directory / "serial").write_text("01\n")
        (directory / "ts.cnf").write_text(TS_CONFIG.format(dir=d))
        self.root_pem = (directory / "root.crt").read_bytes()
        self._lock = threading.Lock()  # openssl ts keeps its serial in one file

    def reply(self, query: bytes) -> bytes:
        with self._lock, tempfile.NamedTemporaryFile(dir=self.dir, suffix=".tsq") as tsq:
            tsq.write(query)
            tsq.flush()
            return _openssl("ts", "-reply", "-config", "ts.cnf", "-queryfile", tsq.name,
                            cwd=self.dir)  # fmt: skip


class TsaServer:
    """The authority over HTTP on 127.0.0.1 (application/timestamp-query in, a reply out)."""

    def __init__(self, authority: OpenSSLAuthority):
        self.authority = authority
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                query = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests += 1
                reply = owner.authority.reply(query)
                self.send_response(200)
                self.send_header("Content-Type", "application/timestamp-reply")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
