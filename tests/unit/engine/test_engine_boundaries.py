import ast
import sys
from pathlib import Path

import decoding.engine

ENGINE = Path(decoding.engine.__file__).parent
# Real providers wrap a model runtime; only they may import one.
# A tokenizer's reading for the grammar library (llguidance) is made beside the tokenizer.
RUNTIMES = {
    "llamacpp.py": {"llama_cpp", "llguidance"},
    "llamacpp_sequences.py": {"llama_cpp"},
    "transformers_hf.py": {"torch", "transformers", "llguidance"},
    "remote.py": {"requests"},  # a model server over HTTP
}
# Outside providers/: weights.py hashes files, and reads a GGUF's metadata (the tokenizer, config
# and chat template it holds) with the gguf package, imported only when a GGUF is hashed.
# model_files.py makes the default model file with llama.cpp's own quantizer.
# grammar.py compiles structured outputs' schemas and computes their masks with llguidance.
HASHING = {"weights.py": {"gguf"}, "model_files.py": {"llama_cpp"}, "grammar.py": {"llguidance"}}


def imported_roots(source: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_engine_imports_nothing_of_django_and_only_providers_import_a_runtime():
    allowed = {"numpy", "__future__"} | set(sys.stdlib_module_names)
    for source in ENGINE.rglob("*.py"):
        if source.parent.name == "providers":
            extra = RUNTIMES.get(source.name, set())
        else:
            extra = HASHING.get(source.name, set())
        roots = imported_roots(source)
        assert "django" not in roots, f"{source.name} imports Django"
        assert roots <= allowed | extra, f"{source.name} imports {roots - allowed - extra}"


def test_importing_the_engine_loads_no_model_runtime():
    # The stub pair and the tests run without llama.cpp or torch being imported at all.
    code = "import decoding.engine, sys; print(sorted({'llama_cpp','torch'} & set(sys.modules)))"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
