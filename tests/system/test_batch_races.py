"""A batch create racing a delete of its input file, on the live stack (issue 41, item 6): each
round, one client creates a batch over a fresh file while another deletes the file. Whichever
wins, the other gets a 4xx naming why (400: no such file; 409: a batch names it), never the 503
of a broken reference, and the outcome is consistent: a created batch still has its file."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest
import requests

from .helpers import Stack, auth

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

ROUNDS = 30
LINE = (
    b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", '
    b'"body": {"model": "stub", "prompt": [1, 2], "max_tokens": 2}}\n'
)


def test_a_create_racing_a_delete_of_its_file_is_a_4xx_never_a_5xx(postgres_stack: Stack):
    base, key = postgres_stack.base_url, auth(postgres_stack.api_key)
    seen = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for _ in range(ROUNDS):
            stored = requests.post(
                f"{base}/v1/files", files={"file": ("race.jsonl", LINE)},
                data={"purpose": "batch"}, headers=key, timeout=30,
            ).json()  # fmt: skip
            start = threading.Barrier(2)

            def create(file_id=stored["id"], start=start):
                start.wait()
                body = {"input_file_id": file_id, "endpoint": "/v1/completions",
                        "completion_window": "24h"}  # fmt: skip
                return requests.post(f"{base}/v1/batches", json=body, headers=key, timeout=30)

            def delete(file_id=stored["id"], start=start):
                start.wait()
                return requests.delete(f"{base}/v1/files/{file_id}", headers=key, timeout=30)

            created, deleted = (f.result() for f in [pool.submit(create), pool.submit(delete)])
            seen.append((created.status_code, deleted.status_code))
            assert created.status_code in (200, 400), created.text
            assert deleted.status_code in (200, 409), deleted.text
            # Exactly one wins: a batch over a kept file, or a deleted file and no batch.
            assert (created.status_code == 200) == (deleted.status_code == 409), seen[-1]
            if created.status_code == 400:
                assert created.json()["error"]["param"] == "input_file_id"
            else:
                still = requests.get(f"{base}/v1/files/{stored['id']}", headers=key, timeout=30)
                assert still.status_code == 200
