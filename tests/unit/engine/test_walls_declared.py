"""Every provider and drafter says where it stands on the walls between matters (ADR 0024):
it defines `walled`, or it is named here as keeping nothing from one call for the next. A new
provider that keeps a cache therefore cannot slip in shared across matters by default."""

import ast
from pathlib import Path

import decoding.engine

ENGINE = Path(decoding.engine.__file__).parent
# Classes that keep nothing one call leaves for another's benefit, and why.
KEEPS_NOTHING = {
    "StubProvider": "a pure function of the context",
    "RemoteProvider": "its server keeps a cache the worker cannot wall (docs/limitations.md)",
    "SequenceProvider": "a slot of a BatchEngine, opened behind its job's wall",
    "Walled": "the wall's view itself",
    "PromptLookupDrafter": "copies from the references each generation is handed (by matter)",
    "RecordedDrafts": "a replay's recorded drafts",
}
BASES = {"Provider", "Drafter"}


def engine_classes() -> dict[str, ast.ClassDef]:
    classes = {}
    for source in [*ENGINE.rglob("*.py"), *ENGINE.parent.joinpath("worker").rglob("*.py")]:
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
    return classes


def subclasses_of(classes: dict[str, ast.ClassDef]) -> dict[str, ast.ClassDef]:
    found: dict[str, ast.ClassDef] = {}
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            if name not in found and bases & (BASES | set(found)):
                found[name] = node
                changed = True
    return found


def test_every_provider_and_drafter_defines_walled_or_keeps_nothing():
    undeclared = [
        name
        for name, node in subclasses_of(engine_classes()).items()
        if name not in KEEPS_NOTHING
        and not any(isinstance(f, ast.FunctionDef) and f.name == "walled" for f in node.body)
    ]
    assert undeclared == [], f"{undeclared}: define walled(), or say here why nothing is kept"


def test_the_list_names_only_classes_that_exist():
    assert set(KEEPS_NOTHING) <= set(subclasses_of(engine_classes()))
