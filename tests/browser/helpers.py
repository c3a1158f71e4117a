"""What the browser tests share: the running portal and its reviewers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.system.helpers import Process, Stack


@dataclass
class Reviewer:
    username: str
    password: str
    matter: str


@dataclass
class Portal:
    """The running stack, the jobs it holds (name -> API representation) and its reviewers."""

    stack: Stack
    alice: Reviewer
    bob: Reviewer
    jobs: dict[str, dict] = field(default_factory=dict)
    log_dir: Path = Path()

    @property
    def base_url(self) -> str:
        return self.stack.base_url

    @property
    def processes(self) -> list[Process]:
        return list(self.stack.processes.values())
