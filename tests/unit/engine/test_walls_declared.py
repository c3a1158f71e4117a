"""Every provider and drafter says where it stands on the walls between matters (ADR 0024):
it defines `walled`, or it is named here as keeping nothing from one call for the next, or as
one whose state the worker cannot wall (and the docs say so). A new provider that keeps a
cache therefore cannot slip in shared across matters by default."""

import ast
from pathlib import Path

import decoding.engine

ENGINE = Path(decoding.engine.__file__).parent
# Classes that keep nothing one call leaves for another's benefit, and why.
KEEPS_NOTHING = {
    "StubProvider": "a pure function of the context",
    "SequenceProvider": "a slot of a SequenceEngine, opened behind its job's wall",
    "Walled": "the wall's view itself",
    "PromptLookupDrafter": "copies from the references each generation is handed (by matter)",
    "RecordedDrafts": "a replay's recorded drafts",
}
# Classes whose state lives where the worker cannot wall it, each named in docs/limitations.md.
NOT_WALLED = {"RemoteProvider": "its server's prompt cache"}
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
            bases = {
                b.id if isinstance(b, ast.Name) else b.attr
                for b in node.bases
                if isinstance(b, ast.Name | ast.Attribute)
            }
            if name not in found and bases & (BASES | set(found)):
                found[name] = node
                changed = True
    return found


def test_every_provider_and_drafter_defines_walled_or_keeps_nothing():
    undeclared = [
        name
        for name, node in subclasses_of(engine_classes()).items()
        if name not in KEEPS_NOTHING | NOT_WALLED.keys()
        and not any(isinstance(f, ast.FunctionDef) and f.name == "walled" for f in node.body)
    ]
    assert undeclared == [], f"{undeclared}: define walled(), or say here why nothing is kept"


def test_the_lists_name_only_classes_that_exist_and_the_limitations_name_the_unwalled():
    assert set(KEEPS_NOTHING) | set(NOT_WALLED) <= set(subclasses_of(engine_classes()))
    limitations = (ENGINE.parents[1] / "docs" / "limitations.md").read_text()
    assert "`remote` provider's server" in limitations
