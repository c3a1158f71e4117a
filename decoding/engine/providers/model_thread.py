"""The one native thread that runs every llama.cpp evaluation of a process.

llama.cpp's CPU backend (built with OpenMP) gives each thread that evaluates a graph a team of
worker threads of its own, and the team stays. Once a process holds more such threads than it
has cores, libgomp stops letting idle workers spin (its throttled spin count), and each graph
then pays for waking them: a one-token step of the default model took 32-37 ms instead of 10 on
a 2-core machine once a second thread had evaluated (docs/adr/0015). A
worker decodes from several threads (a SequenceEngine's, a replay's, a draft model's), so every
evaluation is handed to this thread; evaluations also never overlap, which on two cores would
have each spin on the cores the other needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class ModelThread:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._ident: int | None = None

    def run(self, call: Callable[..., T], *args) -> T:
        """call(*args) on the model thread (at once when already on it); its result or error."""
        if threading.get_ident() == self._ident:
            return call(*args)
        return self._executor.submit(self._enter, call, args).result()

    def _enter(self, call, args):
        self._ident = threading.get_ident()
        return call(*args)


MODEL_THREAD = ModelThread()
