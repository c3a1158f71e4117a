"""Destruction on the real stack (issue 43): gunicorn, a Celery worker decoding with the default
model, PostgreSQL and Redis as deployed.

After `manage.py destroy`, what a records manager's auditor would dump holds none of the
destroyed matter's texts (prompts, answers, a structured output's schema, an uploaded file), as
text or as token ids: the database (pg_dump), every value in Redis,
every file under the var directory; another matter's texts are all there, found by the same
search (so the search is one that finds a text where it is). And the worker no longer starts a
job of the destroyed matter from the prompts it had saved: the same prompt that was served from
its cache before is evaluated afresh after.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
import requests

from .helpers import (
    REPO_ROOT,
    Stack,
    auth,
    create_database,
    describe,
    drop_database,
    forget_queue,
    free_port,
    isolated_env,
    last_line,
    postgres_url,
    start_process,
    stop_all,
    wait_for_workers,
    wait_until_healthy,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

MODEL = "smollm2-135m-instruct"
HELDOUT = REPO_ROOT / "bench" / "data" / "heldout"
# Long enough (well over one 64-token block) for the worker's prompt cache to keep it.
DOCUMENT = (HELDOUT / "apache-2.0-sections-2-5.txt").read_text()[:1200]
SECRET_A = "PRIVILEGED memo of Harrow v. Lindqvist: settle at 3,918,204.\n" + DOCUMENT
FILE_SECRET_A = "Draft deposition outline for Dr. Ilse Varga-Montfort"
SECRET_B = "CONFIDENTIAL work product of Okafor v. Brandt: the key witness is Tomasz Wielgosz."
# A structured output's schema is the matter's text too: its enum names the parties' estate.
SCHEMA_SECRET_A = "Estate of Konstantin Abernethy-Vale"
SCHEMA_A = {
    "type": "json_schema",
    "json_schema": {
        "name": "heir",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"estate": {"enum": [SCHEMA_SECRET_A, "none"]}},
            "required": ["estate"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    suffix = secrets.token_hex(4)
    database = f"pathfinder_destroy_{suffix}"
    admin_url = create_database(database)
    log_dir = tmp_path_factory.mktemp("destroy-stack")
    var_dir = tmp_path_factory.mktemp("destroy-var")
    env = {
        **isolated_env(database, suffix, log_dir),
        "PATHFINDER_VAR_DIR": str(var_dir),
        # The model files made from the shipped weights stay where every stack finds them.
        "PATHFINDER_MODEL_CACHE_DIR": os.environ.get(
            "PATHFINDER_MODEL_CACHE_DIR", str(REPO_ROOT / "var" / "model-cache")
        ),
        "PATHFINDER_LLAMA_THREADS": "1",
        "PATHFINDER_WORKER_SEQUENCES": "4",
    }
    port = free_port()
    stack = Stack(
        base_url=f"http://127.0.0.1:{port}",
        api_key="",
        env=env,
        database=database,
        database_url=postgres_url(database),
        worker_names=[f"destroy-{suffix}@{socket.gethostname()}"],
    )
    stack.var_dir = var_dir
    try:
        migrated = stack.manage("migrate", "--noinput")
        assert migrated.returncode == 0, describe(migrated)
        stack.keys = {
            name: last_line(stack.manage("create_api_key", "--matter", matter, name))
            for name, matter in (("a", "firm-a"), ("b", "firm-b"))
        }
        stack.processes["gunicorn"] = start_process(
            "gunicorn",
            [sys.executable, "-m", "gunicorn", "pathfinder_site.wsgi:application",
             "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4"],
            env, log_dir,
        )  # fmt: skip
        stack.processes["worker"] = start_process(
            "worker",
            [sys.executable, "-m", "celery", "-A", "pathfinder_site", "worker",
             "-n", stack.worker_names[0], "--loglevel", "INFO"],
            env, log_dir,
        )  # fmt: skip
        wait_until_healthy(stack.base_url, list(stack.processes.values()))
        wait_for_workers(stack)
        yield stack
    finally:
        stop_all(list(stack.processes.values()))
        drop_database(admin_url, database)
        forget_queue(env["CELERY_BROKER_URL"], env["PATHFINDER_TASK_QUEUE"])


def complete(stack: Stack, key: str, prompt: str) -> dict:
    response = requests.post(
        stack.url("/v1/completions"),
        json={"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0},
        headers=auth(key),
        timeout=300,
    )
    assert response.status_code == 200, response.text
    return response.json()


def cached_tokens(body: dict) -> int:
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


def matter_texts(stack: Stack, matter: str) -> tuple[list[str], list[list[int]]]:
    """The matter's prompts and answers as texts, and its token id sequences, read from the
    database before the destruction."""
    texts, ids = [], []
    with psycopg.connect(stack.database_url) as connection:
        rows = connection.execute(
            "SELECT j.prompt_text, j.output_text, j.prompt_token_ids::text, "
            "j.output_token_ids::text FROM decoding_generationjob j "
            "JOIN decoding_matter m ON m.id = j.matter_id WHERE m.name = %s",
            [matter],
        ).fetchall()
    for prompt, output, prompt_ids, output_ids in rows:
        texts += [t for t in (prompt, output) if len(t.strip()) >= 12]
        ids += [i for i in (json.loads(prompt_ids), json.loads(output_ids)) if len(i) >= 6]
    return texts, ids


def needles(texts: list[str], ids: list[list[int]]) -> list[bytes]:
    """What a search for the texts looks for: of each text, a cut of its longest line (dumps
    escape line ends), and of each token id sequence a run of six ids."""
    found = []
    for text in texts:
        line = max(text.splitlines(), key=len)
        middle = len(line) // 2
        found.append(line[max(0, middle - 16) : middle + 16].encode())
    for sequence in ids:
        middle = len(sequence) // 2
        found.append(", ".join(map(str, sequence[middle - 3 : middle + 3])).encode())
    return found


def holds(dump: bytes, needle: bytes) -> bool:
    """The needle in the dump as it is, as JSON without spaces writes ids, or hex-encoded
    (pg_dump writes a bytea column so)."""
    forms = (needle, needle.replace(b", ", b","), needle.hex().encode())
    return any(form in dump for form in forms)


def redis_values(client, key) -> list[bytes]:
    """Every value stored under `key`, whatever its type."""
    kind = client.type(key).decode()
    if kind == "string":
        return [client.get(key) or b""]
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "hash":
        return [b"%s=%s" % item for item in client.hgetall(key).items()]
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return client.zrange(key, 0, -1)
    if kind == "stream":
        return [repr(entry).encode() for entry in client.xrange(key)]
    return []


def dumps(stack: Stack) -> dict[str, bytes]:
    """The database as pg_dump writes it, every Redis value, and every file under var/."""
    out = {}
    dumped = subprocess.run(
        ["pg_dump", "--no-owner", stack.database_url], capture_output=True, timeout=120
    )
    assert dumped.returncode == 0, dumped.stderr.decode()
    out["pg_dump"] = dumped.stdout
    values = []
    for db in range(16):
        client = redis.Redis.from_url(stack.env["CELERY_BROKER_URL"], db=db)
        for key in client.scan_iter(count=1000):
            values += [key, *redis_values(client, key)]
    out["redis"] = b"\n".join(values)
    files = []
    for root, _, names in os.walk(stack.var_dir):
        for name in names:
            files.append(Path(root, name).read_bytes())
    out["var"] = b"\n".join(files)
    return out


def test_after_destruction_no_dump_holds_the_matters_texts_and_the_worker_forgot_them(
    stack, tmp_path
):
    a, b = stack.keys["a"], stack.keys["b"]
    complete(stack, a, SECRET_A)
    again = complete(stack, a, SECRET_A)
    # The worker kept A's prompt: the attack surface a destruction must clear.
    assert cached_tokens(again) > 64, again["usage"]
    complete(stack, b, SECRET_B)
    structured = requests.post(
        stack.url("/v1/chat/completions"),
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "Whose estate is it?"}],
            "response_format": SCHEMA_A,
            "max_tokens": 24,
            "temperature": 0,
        },
        headers=auth(a),
        timeout=300,
    )
    assert structured.status_code == 200, structured.text
    upload = tmp_path / "input.jsonl"
    line = {
        "custom_id": "outline",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": MODEL, "messages": [{"role": "user", "content": FILE_SECRET_A}]},
    }
    upload.write_text(json.dumps(line) + "\n")
    with upload.open("rb") as handle:
        uploaded = requests.post(
            stack.url("/v1/files"),
            files={"file": ("input.jsonl", handle)},
            data={"purpose": "batch"},
            headers=auth(a),
            timeout=60,
        )
    assert uploaded.status_code == 200, uploaded.text

    a_texts, a_ids = matter_texts(stack, "firm-a")
    b_texts, b_ids = matter_texts(stack, "firm-b")
    destroyed = needles(a_texts + [FILE_SECRET_A, SCHEMA_SECRET_A], a_ids)
    kept = needles(b_texts, b_ids)
    before = dumps(stack)
    missing = [n for n in destroyed + kept if not any(holds(d, n) for d in before.values())]
    assert not missing, missing  # the search finds each text where it is

    done = stack.manage("destroy", "firm-a", "--order", "Protective order para. 12")
    assert done.returncode == 0, describe(done)
    # This stack's worker; those of other stacks on the same broker are not this deployment's.
    assert "Workers: 1 confirmed" in done.stdout, done.stdout

    after = dumps(stack)
    for where, dump in after.items():
        left = [n for n in destroyed if holds(dump, n)]
        assert not left, f"{where} still holds {left[:3]}"
    assert all(any(holds(dump, n) for dump in after.values()) for n in kept)
    verified = stack.manage("verify_chain", "--all")
    assert verified.returncode == 0, describe(verified)

    content = requests.get(
        stack.url(f"/v1/files/{uploaded.json()['id']}/content"), headers=auth(a), timeout=30
    )
    assert content.status_code == 410 and "Protective order" in content.json()["error"]["message"]
    # The worker starts A's next job from nothing it kept of the destroyed ones.
    assert cached_tokens(complete(stack, a, SECRET_A)) == 0
