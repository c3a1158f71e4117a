"""docs/audit-format.md carries the texts of README.txt verbatim (its appendix), so an outsider
makes README.txt again from the document alone: the appendix must be the templates the code and
the page verifier fill (audit/evidence/bundle_texts.json), every one of them, byte for byte."""

import hashlib
import re
from pathlib import Path

from audit.evidence.descriptive import TEXTS

DOC = (Path(__file__).parents[3] / "docs" / "audit-format.md").read_text("utf-8")
APPENDIX = DOC.split("## Appendix: the texts of `README.txt`", 1)[1]
BLOCK = re.compile(
    r"^### `([a-z_0-9]+)`\n\nSHA-256 of its UTF-8 bytes: `([0-9a-f]{64})`\n\n"
    r"````text\n(.*?)\n````$",
    re.M | re.S,
)


def test_the_appendix_is_every_template_byte_for_byte():
    documented = {name: (digest, text) for name, digest, text in BLOCK.findall(APPENDIX)}
    templates = {k: v for k, v in TEXTS.items() if k not in ("about", "reportlab")}
    assert documented.keys() == templates.keys()
    for name, text in templates.items():
        assert documented[name] == (hashlib.sha256(text.encode()).hexdigest(), text), name


def test_the_appendix_names_the_reportlab_release():
    assert f"`reportlab` is `{TEXTS['reportlab']}`" in APPENDIX
