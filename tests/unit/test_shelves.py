"""The shelves of decoding/ (issue 45 item 1; decoding/__init__.py): web/ and worker/ never
import each other, protocol/ and the shared root import neither (only the worker's entry points
import worker/), and a worker loads nothing of web/. An AST scan of every import, the lazy ones
inside functions included, and a process that loads what a Celery worker loads."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECODING = ROOT / "decoding"
# The worker's entry points: the Celery tasks and the commands that decode in their own process.
WORKER_ENTRY_POINTS = {
    "decoding/tasks.py",
    "decoding/management/commands/generate.py",
    "decoding/management/commands/replay.py",
}


def shelf(path: str) -> str:
    parts = Path(path).parts
    return parts[1] if len(parts) > 2 and parts[1] in ("web", "worker", "protocol") else "root"


def imported(source: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return modules


def violations(sources: dict[str, str]) -> list[str]:
    """(path relative to the repository -> source) -> each import that crosses a shelf line."""
    found = []
    for path, source in sorted(sources.items()):
        own = shelf(path)
        for module in sorted(imported(source)):
            target = module.split(".")[1] if module.startswith("decoding.") else None
            if target == "web" and own != "web":
                found.append(f"{path} imports {module}: only web/ imports web/")
            elif target == "worker" and own != "worker" and path not in WORKER_ENTRY_POINTS:
                found.append(f"{path} imports {module}: only worker/ and its entry points do")
    return found


def decoding_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for path in DECODING.rglob("*.py")
        if "migrations" not in path.parts
    }


def test_no_shelf_imports_across_its_line():
    assert violations(decoding_sources()) == []


def test_a_planted_import_from_worker_into_web_is_found():
    planted = {
        **decoding_sources(),
        "decoding/worker/planted.py": "def f():\n    from decoding.web import relay\n",
        "decoding/protocol/planted.py": "import decoding.worker.runtime\n",
    }
    assert violations(planted) == [
        "decoding/protocol/planted.py imports decoding.worker.runtime: only worker/ and its "
        "entry points do",
        "decoding/worker/planted.py imports decoding.web: only web/ imports web/",
        "decoding/worker/planted.py imports decoding.web.relay: only web/ imports web/",
    ]


def test_a_worker_loads_nothing_of_the_web_shelf():
    # What a Celery worker imports, and a batch line refused for each kind of reason, as the
    # worker's batch task checks lines.
    code = """
import django, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pathfinder_site.settings")
django.setup()
import pathfinder_site.celery, decoding.tasks, decoding.batches
import decoding.worker.execution, decoding.worker.replay, decoding.worker.runtime
from decoding.protocol.batch_lines import line_check
for line in ('{"custom_id": "a", "method"', '[1]', '{"custom_id": "a", "method": "GET"}'):
    line_check("/v1/chat/completions", line)
print(sorted(m for m in sys.modules if m.startswith("decoding.web")))
"""
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip().splitlines()[-1] == "[]", loaded.stdout
