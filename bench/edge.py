"""The edge, side by side: Pathfinder's front (pathfinder_site.front) and nginx from Debian running
deploy/nginx/pathfinder.conf as shipped, each before the same gunicorn (gunicorn.conf.py, two
workers), in one run on one machine (docs/adr/0027).

    .venv/bin/python bench/edge.py [--out bench/results]

Measured through each edge, and reported as the front's figure over nginx's:
- small requests: GET /healthz and an API read (GET /v1/models, a key checked in the database)
  from 8 clients: requests a second, p50 and p99 latency;
- a 20 MB batch input uploaded, and downloaded: seconds each (median of 5);
- four keyless 100 MiB uploads at once: seconds until all four have their 401, and the largest
  resident memory of the edge and of gunicorn meanwhile;
- forty clients that stall while downloading the 20 MB file: /healthz latency meanwhile (median
  and worst of 20 probes), the largest resident memory of the edge and gunicorn, and whether
  each edge has cut every stalled client 75 s later.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import Stack, free_port, percentile  # noqa: E402
from bench.machine import run_facts, save_results  # noqa: E402
from deploy.nginx import local as nginx  # noqa: E402
from tests.system.helpers import (  # noqa: E402
    RssWatch,
    batch_file_of,
    received_until_closed,
    stalled_download,
)

MIB = 1 << 20
EDGES = ("front", "nginx")


def edges_before(stack: Stack, workdir: Path) -> dict:
    """The front and nginx before the stack's gunicorn: {edge: (url, pid)}."""
    front_port, nginx_port = free_port(), free_port()
    upstream = f"127.0.0.1:{stack.port}"
    stack._spawn("front", [sys.executable, "-m", "pathfinder_site.front", "--bind",
                           f"127.0.0.1:{front_port}", "--upstream", upstream])  # fmt: skip
    config = nginx.write_config(workdir / "nginx", nginx_port, stack.port)
    stack._spawn("nginx", nginx.command(config))
    front, edge = stack.processes[-2], stack.processes[-1]
    urls = {"front": f"http://127.0.0.1:{front_port}", "nginx": f"http://127.0.0.1:{nginx_port}"}
    for url in urls.values():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
    return {"front": (urls["front"], front.pid), "nginx": (urls["nginx"], edge.pid)}


def small_requests(url: str, path: str, headers: dict, count: int, clients: int = 8) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    errors = [0]

    def client(n: int) -> None:
        session = requests.Session()
        for _ in range(n):
            started = time.perf_counter()
            ok = session.get(f"{url}{path}", headers=headers, timeout=30).status_code == 200
            with lock:
                latencies.append(time.perf_counter() - started)
                errors[0] += not ok

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(count // clients,)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    return {"requests": len(latencies), "errors": errors[0],
            "per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2)}  # fmt: skip


def transfers(url: str, headers: dict, data: bytes, file_id: str) -> dict:
    ups, downs = [], []
    for _ in range(5):
        started = time.perf_counter()
        answer = requests.post(f"{url}/v1/files", files={"file": ("b.jsonl", data)},
                               data={"purpose": "batch"}, headers=headers, timeout=300)  # fmt: skip
        ups.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text[:200]
        requests.delete(f"{url}/v1/files/{answer.json()['id']}", headers=headers, timeout=60)
        started = time.perf_counter()
        got = requests.get(f"{url}/v1/files/{file_id}/content", headers=headers, timeout=300)
        downs.append(time.perf_counter() - started)
        assert got.content == data
    return {"upload_20mb_s": round(statistics.median(ups), 3),
            "download_20mb_s": round(statistics.median(downs), 3)}  # fmt: skip


def keyless_uploads(url: str, pids: dict, workdir: Path) -> dict:
    body = workdir / "keyless.bin"
    with open(body, "wb") as handle:
        handle.truncate(100 * MIB)

    def upload(_):
        with open(body, "rb") as handle:
            kind = {"Content-Type": "multipart/form-data; boundary=x"}
            return requests.post(f"{url}/v1/files", data=handle, timeout=300, headers=kind)

    with RssWatch(pids) as watch, concurrent.futures.ThreadPoolExecutor(4) as pool:
        started = time.perf_counter()
        codes = [answer.status_code for answer in pool.map(upload, range(4))]
        seconds = time.perf_counter() - started
    memory = {f"{name}_rss_mib": round(most / MIB) for name, most in watch.most.items()}
    return {"codes": codes, "seconds": round(seconds, 2), **memory}


def stalled_downloads(urls: dict, pids: dict, key: str, file_id: str, size: int) -> dict:
    path = f"/v1/files/{file_id}/content"
    started = time.monotonic()
    stalled = {edge: [stalled_download(int(urls[edge].rsplit(":", 1)[1]), path, key)
                      for _ in range(40)] for edge in EDGES}  # fmt: skip
    report: dict = {}
    with RssWatch(pids) as watch:
        time.sleep(5)
        for edge in EDGES:
            probes = []
            for _ in range(20):
                asked = time.perf_counter()
                requests.get(f"{urls[edge]}/healthz", timeout=30)
                probes.append(time.perf_counter() - asked)
            report[edge] = {"healthz_p50_ms": round(statistics.median(probes) * 1000, 2),
                            "healthz_worst_ms": round(max(probes) * 1000, 2)}  # fmt: skip
    time.sleep(max(0.0, 75 - (time.monotonic() - started)))
    for edge, connections in stalled.items():
        got = [received_until_closed(connection, size) for connection in connections]
        report[edge]["cut_by_75s"] = sum(1 for n in got if n < size)
        report[edge]["stalled"] = len(connections)
    report["rss_mib"] = {name: round(most / MIB) for name, most in watch.most.items()}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    options = parser.parse_args()
    report = {**run_facts("edge.py")}
    with tempfile.TemporaryDirectory() as logs:
        workdir = Path(logs)
        stack = Stack(workdir, threads=1, workers=("w1",))  # /readyz wants a worker
        stack.env["PATHFINDER_TRUSTED_PROXIES"] = "127.0.0.1"
        try:
            key = stack.start()
            headers = {"Authorization": f"Bearer {key}"}
            urls_pids = edges_before(stack, workdir)
            urls = {edge: url for edge, (url, _) in urls_pids.items()}
            gunicorn_pid = stack.processes[0].pid
            data = batch_file_of(20 * MIB)
            upload = {"file": ("b.jsonl", data)}
            form = {"purpose": "batch"}
            stored = requests.post(
                f"{urls['front']}/v1/files", files=upload, data=form, headers=headers, timeout=300
            )
            file_id = stored.json()["id"]
            for edge in EDGES:
                url, pid = urls_pids[edge]
                report[edge] = {
                    "healthz": small_requests(url, "/healthz", {}, 3000),
                    "models": small_requests(url, "/v1/models", headers, 1000),
                    **transfers(url, headers, data, file_id),
                    "keyless_4x100mib": keyless_uploads(
                        url, {"edge": pid, "gunicorn": gunicorn_pid}, workdir
                    ),
                }  # fmt: skip
            pids = {"front": urls_pids["front"][1], "nginx": urls_pids["nginx"][1],
                    "gunicorn": gunicorn_pid}  # fmt: skip
            report["stalled_40x20mb"] = stalled_downloads(urls, pids, key, file_id, len(data))
        finally:
            stack.stop()
    front, other = report["front"], report["nginx"]
    ratios = {
        "healthz_per_s": front["healthz"]["per_s"] / other["healthz"]["per_s"],
        "models_per_s": front["models"]["per_s"] / other["models"]["per_s"],
        "upload_s": front["upload_20mb_s"] / other["upload_20mb_s"],
        "download_s": front["download_20mb_s"] / other["download_20mb_s"],
    }
    report["front_over_nginx"] = {name: round(value, 3) for name, value in ratios.items()}
    save_results(options.out, "edge", report, render(report))
    print(render(report))


def render(report: dict) -> str:
    f, n, r = report["front"], report["nginx"], report["front_over_nginx"]
    s = report["stalled_40x20mb"]

    def pair(figures: dict, a: str, b: str) -> str:
        return f"{figures[a]} / {figures[b]}"

    rows = [
        ("GET /healthz, 8 clients: requests/s", f["healthz"]["per_s"], n["healthz"]["per_s"],
         r["healthz_per_s"]),
        ("GET /healthz p50 / p99 ms", pair(f["healthz"], "p50_ms", "p99_ms"),
         pair(n["healthz"], "p50_ms", "p99_ms"), ""),
        ("GET /v1/models (key checked), 8 clients: requests/s", f["models"]["per_s"],
         n["models"]["per_s"], r["models_per_s"]),
        ("GET /v1/models p50 / p99 ms", pair(f["models"], "p50_ms", "p99_ms"),
         pair(n["models"], "p50_ms", "p99_ms"), ""),
        ("upload 20 MB, s (median of 5)", f["upload_20mb_s"], n["upload_20mb_s"], r["upload_s"]),
        ("download 20 MB, s (median of 5)", f["download_20mb_s"], n["download_20mb_s"],
         r["download_s"]),
        ("4 keyless 100 MiB uploads: answers, seconds",
         pair(f["keyless_4x100mib"], "codes", "seconds"),
         pair(n["keyless_4x100mib"], "codes", "seconds"), ""),
        ("... largest RSS MiB, edge / gunicorn",
         pair(f["keyless_4x100mib"], "edge_rss_mib", "gunicorn_rss_mib"),
         pair(n["keyless_4x100mib"], "edge_rss_mib", "gunicorn_rss_mib"), ""),
        ("40 stalled 20 MB downloads on each: /healthz p50 / worst ms",
         pair(s["front"], "healthz_p50_ms", "healthz_worst_ms"),
         pair(s["nginx"], "healthz_p50_ms", "healthz_worst_ms"), ""),
        ("... stalled clients cut 75 s later", pair(s["front"], "cut_by_75s", "stalled"),
         pair(s["nginx"], "cut_by_75s", "stalled"), ""),
        ("... largest RSS MiB: the edge (gunicorn: both at once)", s["rss_mib"]["front"],
         s["rss_mib"]["nginx"], f"gunicorn {s['rss_mib']['gunicorn']}"),
    ]  # fmt: skip
    lines = [
        f"# The edge: the front beside nginx ({report['date']})",
        "",
        f"`{report['command']}` at {report['revision']}",
        "",
        f"Machine: {json.dumps(report['machine'])}",
        "",
        "| | front | nginx | front / nginx |",
        "|---|---|---|---|",
        *(f"| {name} | {front} | {other} | {ratio} |" for name, front, other, ratio in rows),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
