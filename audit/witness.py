"""A transparency-log witness (C2SP tlog-witness v1, Ed25519 tlog-cosignature v1).

    python -m audit.witness keygen --name NAME --out FILE
    python -m audit.witness serve --key FILE --state DIR --bind HOST:PORT \\
        --log LOG_VERIFIER_KEY [--log ...]

A witness cosigns a log's checkpoint only after checking the log's signature and a consistency
proof from the last checkpoint it cosigned for that log, and it remembers that checkpoint
durably, so it never cosigns two views of one log that disagree, nor a smaller tree after a
larger one, across restarts. Run it somewhere the log's operator cannot rewrite.

Standard library and `cryptography` only (with audit.evidence.checkpoints and
audit.evidence.merkle). A log is
known by its origin, which is its verifier key's name (Pathfinder names its key after the
origin). Answers, as the spec says: 404 an unknown origin, 403 no valid signature by the log's
key, 400 a malformed request or an old size above the new one, 409 an old size that is not the
one last cosigned (the body says which, as text/x.tlog.size), 422 a bad consistency proof or a
same-size checkpoint with another root; 200 with the cosignature line.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import fcntl
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from audit.evidence import checkpoints, merkle

MAX_BODY = 64 * 1024
MAX_PROOF_LINES = 63


class Refusal(Exception):
    def __init__(self, status: int, message: str, body: str | None = None):
        super().__init__(message)
        self.status, self.body = status, body


class Witness:
    """The witness's state: its key, the logs it knows, and per log the last checkpoint it
    cosigned, kept in one file per origin (written atomically and fsynced before answering)."""

    def __init__(self, key: str, state_dir: Path, log_keys: list[str]):
        self.key = key
        self.verifier = checkpoints.verifier_key_for(key, alg=checkpoints.ALG_COSIGNATURE)
        self.state_dir = state_dir
        # origin -> its keys (a rotated log is given its old and new key, each with --log)
        self.logs: dict[str, list[str]] = {}
        for key in log_keys:
            self.logs.setdefault(checkpoints.parse_verifier_key(key).name, []).append(key)
        self._lock = threading.Lock()  # check-and-persist is one step (the spec's race)
        state_dir.mkdir(parents=True, exist_ok=True)

    def _state_path(self, origin: str) -> Path:
        return self.state_dir / f"{hashlib.sha256(origin.encode()).hexdigest()}.json"

    def latest(self, origin: str) -> dict | None:
        """The last cosigned checkpoint of a log: {"size", "root" (hex), "note"}."""
        path = self._state_path(origin)
        return json.loads(path.read_text("utf-8")) if path.exists() else None

    def _persist(self, origin: str, size: int, root: bytes, note: str) -> None:
        path = self._state_path(origin)
        tmp = path.with_suffix(".partial")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"origin": origin, "size": size, "root": root.hex(), "note": note}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        directory = os.open(self.state_dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def add_checkpoint(self, body: bytes) -> str:
        """Handle one add-checkpoint request body; the cosignature line, or Refusal."""
        old_size, proof, note = _parse_request(body)
        try:
            claimed = checkpoints.parse_unverified(note)
        except checkpoints.CheckpointError as exc:
            raise Refusal(400, f"malformed checkpoint: {exc}") from exc
        log_keys = self.logs.get(claimed.origin)
        if log_keys is None:
            raise Refusal(404, f"unknown log origin {claimed.origin!r}")
        checkpoint, log_key, errors = None, None, []
        for key in log_keys:
            try:
                checkpoint, log_key = checkpoints.parse_and_verify(note, key), key
                break
            except checkpoints.CheckpointError as exc:
                errors.append(str(exc))
        if checkpoint is None:
            raise Refusal(403, f"no valid signature by the log's key: {'; '.join(errors)}")
        if old_size > checkpoint.size:
            raise Refusal(400, f"old size {old_size} is above the checkpoint's {checkpoint.size}")
        if checkpoint.size == 0 and checkpoint.root != merkle.EMPTY_ROOT:
            raise Refusal(422, "a checkpoint of size 0 must have the empty tree's root")
        with self._lock, _state_lock(self.state_dir):
            latest = self.latest(checkpoint.origin)
            known = latest["size"] if latest else 0
            if old_size != known:
                raise Refusal(409, f"last cosigned size is {known}", body=f"{known}\n")
            if old_size == 0:
                if proof:
                    raise Refusal(422, "a proof from size 0 must be empty")
            else:
                old_root = bytes.fromhex(latest["root"])
                consistent = merkle.verify_consistency(
                    old_size, checkpoint.size, old_root, checkpoint.root, proof
                )
                if not consistent:
                    raise Refusal(
                        422,
                        f"checkpoint of size {checkpoint.size} is not consistent with the one "
                        f"of size {old_size} this witness cosigned",
                    )
            line = checkpoints.cosign(note, self.key, int(time.time()))
            own = checkpoints.with_signature_lines(_log_signed_only(note, log_key), [line])
            self._persist(checkpoint.origin, checkpoint.size, checkpoint.root, own)
        return line


@contextlib.contextmanager
def _state_lock(state_dir: Path):
    """An exclusive lock on the state directory, so two witness processes sharing it never
    both pass the size check."""
    with open(state_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _log_signed_only(note: str, log_key: str) -> str:
    """The note with only the log's own signature line (what the witness keeps and serves)."""
    key = checkpoints.parse_verifier_key(log_key)
    body, _, block = note.partition("\n\n")
    prefix = f"{checkpoints.SIGNATURE_PREFIX}{key.name} "
    own = [line for line in block.split("\n") if line.startswith(prefix)]
    return body + "\n\n" + "\n".join(own) + "\n"


def _parse_request(body: bytes) -> tuple[int, list[bytes], str]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refusal(400, "the request is not UTF-8") from exc
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise Refusal(400, "the request has no empty line before the checkpoint")
    lines = head.split("\n")
    first = lines[0]
    size_text = first[4:] if first.startswith("old ") else ""
    valid = size_text.isascii() and size_text.isdigit() and len(size_text) <= 19
    if not valid or size_text != str(int(size_text)):
        raise Refusal(400, "the first line must be 'old <size>' in decimal, no leading zeros")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise Refusal(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = []
    for line in lines[1:]:
        try:
            digest = base64.b64decode(line.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error) as exc:
            raise Refusal(400, "a consistency proof line is not base64") from exc
        if len(digest) != merkle.HASH_SIZE:
            raise Refusal(400, "a consistency proof line is not a 32-byte hash")
        proof.append(digest)
    return int(size_text), proof, note


class _Handler(BaseHTTPRequestHandler):
    witness: Witness  # set on the subclass made by serve()
    protocol_version = "HTTP/1.1"
    timeout = 30  # a client that stalls loses its connection, not a thread for ever

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") != "/add-checkpoint":
            return self._answer(404, "not found\n")
        length_text = self.headers.get("Content-Length") or ""
        if not length_text.isascii() or not length_text.isdigit():
            return self._answer(400, "a Content-Length is required\n")
        if int(length_text) > MAX_BODY:
            return self._answer(400, "request too large\n")
        try:
            line = self.witness.add_checkpoint(self.rfile.read(int(length_text)))
        except Refusal as refusal:
            content_type = "text/x.tlog.size" if refusal.status == 409 else "text/plain"
            return self._answer(refusal.status, refusal.body or f"{refusal}\n", content_type)
        except Exception as exc:  # never a dropped connection: say what went wrong
            return self._answer(500, f"{type(exc).__name__}: {exc}\n")
        self._answer(200, line)

    def do_GET(self) -> None:  # noqa: N802
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[1] == "checkpoint":
            for origin in self.witness.logs:
                if hashlib.sha256(origin.encode()).hexdigest() == parts[0]:
                    latest = self.witness.latest(origin)
                    if latest is not None:
                        return self._answer(200, latest["note"])
        self._answer(404, "not found\n")

    def _answer(self, status: int, text: str, content_type: str = "text/plain") -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        sys.stderr.write(f"witness: {self.address_string()} {format % args}\n")


def serve(witness: Witness, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"witness": witness})
    return ThreadingHTTPServer((host, port), handler)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.witness", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    keygen = verbs.add_parser("keygen", help="make a witness key; prints its verifier key last")
    keygen.add_argument("--name", required=True, help="the witness's name (a schema-less URL)")
    keygen.add_argument("--out", required=True, type=Path, help="the private key file to write")
    run = verbs.add_parser("serve", help="answer add-checkpoint requests")
    run.add_argument("--key", required=True, type=Path, help="the witness's private key file")
    run.add_argument("--state", required=True, type=Path, help="where cosigned sizes are kept")
    run.add_argument("--bind", required=True, help="HOST:PORT")
    run.add_argument(
        "--log", action="append", required=True, help="a log's verifier key (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.verb == "keygen":
        private, verifier = checkpoints.generate_signing_key(
            args.name, alg=checkpoints.ALG_COSIGNATURE
        )
        descriptor = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(private + "\n")
        print(f"Wrote the witness key to {args.out} (keep it private).")
        print(verifier)
        return 0
    key = args.key.read_text(encoding="ascii").strip()
    host, _, port = args.bind.rpartition(":")
    witness = Witness(key, args.state, args.log)
    server = serve(witness, host, int(port))
    print(f"witness {witness.verifier} listening on {args.bind}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
