import ast
import sys
from pathlib import Path

import decoding.engine

ENGINE = Path(decoding.engine.__file__).parent


def test_the_engine_imports_nothing_but_numpy_the_standard_library_and_itself():
    allowed = {"numpy", "__future__"} | set(sys.stdlib_module_names)
    for source in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{source.name} imports {roots - allowed}"
