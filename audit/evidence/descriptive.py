"""A bundle's README.txt, verification.txt and report.pdf, made from its other members alone.

Bundle format 4 and later: the writer (audit.evidence.bundle) makes these three members with
these functions from the members it has just laid out, and both verifiers make them again from
the bundle they were given and require the same bytes. So nothing in them can say what the
records, the ledger leaf, the checkpoint, matter.json and the disclosed texts do not: a
rewritten certification, a seal time, a verification or a report that disagrees with the
evidence fails verification. Format 5 names as the checkpoint's signer only the key in
verifier-key.txt (the one signature a verifier checks without witness keys).

Pure Python (no Django), like the verifier; ReportLab only for the PDF, imported when it is made.
docs/audit-format.md gives the texts' grammar.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from audit.evidence import binding, checkpoints
from audit.evidence.bundle_format import (
    ANSWER,
    BUNDLE_FORMAT_VERSION,
    CHAIN,
    CHECKPOINT,
    DESTRUCTION,
    DISCLOSURES,
    LEDGER_LEAF,
    MATTER,
    NAMED_SIGNERS_SINCE,
    PROMPT,
    README,
    RECEIPT,
    RECEIPTS_SINCE,
    RECORDS,
    REPORT,
    VERIFICATION,
    VERIFIER_KEY,
    trail_member,
)
from audit.evidence.trail_facts import Texts, TrailFacts

# README.txt's templates, shared with the page verifier (verify.js), which fills them the same way.
TEXTS = json.loads((Path(__file__).parent / "bundle_texts.json").read_text("utf-8"))
# The ReportLab release whose invariant mode report.pdf's bytes are made with (pyproject.toml
# pins it): another release may lay the same report out in other bytes.
REPORTLAB_VERSION = TEXTS["reportlab"]
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def fill(template: str, values: dict) -> str:
    """`template` with each {name} replaced, in one pass, by str(values[name])."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def readme_template(kind: str, bundle_format: int) -> str:
    """README.txt's template ("trail_readme" or "matter_readme") of that bundle format: format 5
    tells the examiner to verify with the examiner's package, format 6 names the receipt, the
    destruction and who directed the job."""
    if bundle_format >= RECEIPTS_SINCE:
        return TEXTS[f"{kind}_6"]
    return TEXTS[f"{kind}_5" if bundle_format >= NAMED_SIGNERS_SINCE else kind]


def quoted(text: str) -> str:
    """A name in the texts: JSON's string form (JSON.stringify's in verify.js)."""
    return json.dumps(text, ensure_ascii=False)


def reportlab_mismatch() -> str | None:
    """Why this machine's ReportLab may lay report.pdf out in other bytes, or None."""
    import reportlab

    if reportlab.Version == REPORTLAB_VERSION:
        return None
    return (
        f"this machine has ReportLab {reportlab.Version}; report.pdf is made with "
        f"{REPORTLAB_VERSION} (pip install reportlab=={REPORTLAB_VERSION})"
    )


class Unreadable(ValueError):
    """The members these texts are made from cannot be read (the other checks say why)."""


@dataclass(frozen=True)
class Signed:
    """What checkpoint.txt states: the log, its tree and every signature line's name; and which
    of those lines is by the key in verifier-key.txt (the one signature a verifier checks)."""

    note: str
    origin: str
    tree_size: int
    signers: tuple[str, ...]
    bundled: tuple[str, ...]  # the lines (names) by the key in verifier-key.txt
    others: tuple[str, ...]  # every other line's name: a witness's, checked only when pinned

    def signed_by(self, bundle_format: int) -> str:
        """Who signed the checkpoint, as the texts of that bundle format say it."""
        if bundle_format < NAMED_SIGNERS_SINCE:  # every line's name, checked or not
            return ", ".join(self.signers)
        said = (
            f"the key in verifier-key.txt ({', '.join(self.bundled)})"
            if self.bundled
            else "no line of the key in verifier-key.txt"
        )
        if self.others:
            said += (
                f"; it also carries signature lines named {', '.join(self.others)}, which no "
                "check here verifies (each is a witness's only where --witness-key pins its key)"
            )
        return said


def signed_of(members: dict[str, bytes]) -> Signed:
    note = _text(members, CHECKPOINT)
    try:
        checkpoint = checkpoints.parse_unverified(note)
    except checkpoints.CheckpointError as exc:
        raise Unreadable(f"checkpoint.txt: {exc}") from exc
    lines = [line[2:].split(" ") for line in note.split("\n") if line.startswith("\u2014 ")]
    signers = tuple(words[0] for words in lines)
    key = members.get(VERIFIER_KEY, b"").decode("utf-8", "replace").strip()
    by_key = [checkpoints.line_of_key(words, key) for words in lines]
    bundled = tuple(name for name, mine in zip(signers, by_key, strict=True) if mine)
    others = tuple(name for name, mine in zip(signers, by_key, strict=True) if not mine)
    return Signed(note, checkpoint.origin, checkpoint.size, signers, bundled, others)


def trail_facts(members: dict[str, bytes], prefix: str = "") -> TrailFacts:
    """One trail's facts from its members (a one-trail bundle's, or those under `prefix` in a
    matter bundle): its chain, records, ledger leaf and disclosed texts."""
    chain_doc = _json(members, prefix + CHAIN)
    leaf = _json(members, prefix + LEDGER_LEAF)
    sealed = json.loads(leaf["payload"])
    lines = _text(members, prefix + RECORDS).split("\n")  # never splitlines: U+2028 is text
    payloads = [json.loads(line) for line in lines[:-1] if lines[-1] == ""]
    request = next((p for p in payloads if binding.kind_of(p) == binding.REQUEST), {})
    listed = {
        "trail_id": chain_doc["trail_id"],
        "job_id": sealed["job"],
        "attempt": request.get("attempt"),  # a v1 trail records none
        "outcome": sealed["outcome"],
        "abandoned": sealed["outcome"] == "abandoned",
        "leaf_index": leaf["index"],
    }
    texts = Texts(
        _json(members, prefix + DISCLOSURES),
        _text(members, prefix + PROMPT),
        _text(members, prefix + ANSWER),
    )
    stated = _json(members, prefix + DESTRUCTION) if prefix + DESTRUCTION in members else {}
    return TrailFacts.of(
        listed,
        payloads,
        texts,
        chain_doc["head_hash"],
        destruction=stated if stated.get("destroyed") is True else None,
        receipt=bool(members.get(prefix + RECEIPT)),
    )


def trail_verification(facts: TrailFacts, signed: Signed, bundle_format: int) -> str:
    """verification.txt of a one-trail bundle: what the bundle claims, each claim one that
    python -m audit.offline_verify checks."""
    claims = [
        *_CLAIMS_HEAD,
        *_trail_claims(facts, bundle_format),
        _checkpoint_claim(signed, bundle_format),
    ]
    return "\n".join(claims) + "\n"


def matter_verification(
    matter: dict, trails: list[TrailFacts], signed: Signed, bundle_format: int
) -> str:
    """verification.txt of a matter bundle: the same claims for every trail it holds."""
    lines = [
        *_CLAIMS_HEAD,
        f"- {len(trails)} trail(s) of matter {quoted(matter['matter'])}, each with a request "
        "record naming that matter",
        *(claim for facts in trails for claim in _trail_claims(facts, bundle_format)),
        _checkpoint_claim(signed, bundle_format),
        f"- {len(matter['left_out'])} trail(s) left out, listed in matter.json with the reason",
    ]
    return "\n".join(lines) + "\n"


_CLAIMS_HEAD = (
    "Claims of this bundle, each checked by python -m audit.offline_verify (the service",
    "checked them against its store before it exported the bundle):",
)


def _checkpoint_claim(signed: Signed, bundle_format: int) -> str:
    signers = signed.signed_by(bundle_format) or "nobody"
    return (
        f"- the checkpoint states a tree of {signed.tree_size} trails of log "
        f"{quoted(signed.origin)}, signed by {signers}"
    )


def _trail_claims(facts: TrailFacts, bundle_format: int) -> list[str]:
    attempt = "no attempt recorded" if facts.attempt is None else f"attempt {facts.attempt}"
    claims = [
        f"- trail {facts.trail_id} (job {facts.job_id}, {attempt}): {facts.record_count} "
        f"records chained from its genesis to head {facts.head_hash}; ledger entry "
        f'{facts.leaf_index} seals that count and head with outcome "{facts.outcome}" and is in '
        "the checkpoint's tree"
    ]
    if bundle_format < RECEIPTS_SINCE:
        return claims
    if facts.receipt:
        claims.append(
            f"- its receipt.cose is an RFC 9942 COSE receipt of ledger entry {facts.leaf_index} "
            "under the checkpoint's root, signed by the key in verifier-key.txt"
        )
    if facts.destruction is not None:
        claims.append(
            f"- its destruction.json states that its texts were destroyed on "
            f"{facts.destruction['destroyed_at']} under the order "
            f"{quoted(facts.destruction['order'])}, and it discloses none of them"
        )
    return claims


def destroyed_of(facts: TrailFacts) -> str:
    """README.txt's sentence on a destroyed trail ("" for one that was not)."""
    if facts.destruction is None:
        return ""
    return (
        f" Its texts were destroyed on {facts.destruction['destroyed_at']} under the order "
        f"{quoted(facts.destruction['order'])} (destruction.json)."
    )


def selection_of(matter: dict) -> str:
    """What a matter bundle holds, in words, from matter.json's matter, since, until and batch."""
    since, until, batch = matter.get("since"), matter.get("until"), matter.get("batch")
    days = (
        f" from {since or 'the first job'} to {until or 'the last'} (UTC, inclusive)"
        if since or until
        else ""
    )
    lines = f" that were lines of batch {quoted(batch)}" if batch is not None else ""
    return f"every trail of matter {quoted(matter['matter'])}{lines}{days}"


def trail_descriptive(
    members: dict[str, bytes], bundle_format: int = BUNDLE_FORMAT_VERSION, *, pdf: bool = True
) -> dict[str, bytes]:
    """report.pdf, verification.txt and README.txt of a one-trail bundle of that format with
    these members (`pdf` False: the two texts only, which need no ReportLab)."""
    with _readable():
        return _trail_descriptive(members, bundle_format, pdf)


def matter_descriptive(
    members: dict[str, bytes], bundle_format: int = BUNDLE_FORMAT_VERSION, *, pdf: bool = True
) -> dict[str, bytes]:
    """report.pdf, verification.txt and README.txt of a matter bundle of that format with these
    members (`pdf` False: the two texts only)."""
    with _readable():
        ids = [entry["trail_id"] for entry in _json(members, MATTER)["trails"]]
        trails = [trail_facts(members, trail_member(t, "")) for t in ids]
        return _matter_descriptive(members, trails, bundle_format, pdf)


def matter_descriptive_of(
    head: dict[str, bytes], trails: list[TrailFacts], bundle_format: int = BUNDLE_FORMAT_VERSION
) -> dict[str, bytes]:
    """matter_descriptive for a writer that streams the trails' members: from matter.json and
    the signed members (`head`) and the facts of each trail matter.json lists, in its order
    (trail_facts of its members as they were written)."""
    with _readable():
        return _matter_descriptive(head, trails, bundle_format, pdf=True)


@contextlib.contextmanager
def _readable():
    """Hostile members (a bundle under verification) raise Unreadable, never anything else."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"the members cannot be read ({type(exc).__name__}: {exc})") from exc


def _trail_descriptive(members: dict[str, bytes], bundle_format: int, pdf: bool) -> dict:
    facts, signed = trail_facts(members), signed_of(members)
    verification = trail_verification(facts, signed, bundle_format)
    disclosures = _json(members, DISCLOSURES)
    withheld = sorted(n for n, d in disclosures.items() if d == {"withheld": True})
    readme = fill(
        readme_template("trail_readme", bundle_format),
        dict(
            trail_id=facts.trail_id,
            job_id=facts.job_id,
            attempt=facts.attempt if facts.attempt is not None else "not recorded",
            record_count=facts.record_count,
            format_version=_json(members, CHAIN)["format_version"],
            outcome=facts.outcome,
            origin=signed.origin,
            tree_size=signed.tree_size,
            withheld=f" Withheld: {', '.join(withheld)}." if withheld else "",
            destroyed=destroyed_of(facts),
            direction=facts.direction_said(),
            verification=verification,
            reportlab=REPORTLAB_VERSION,
        ),
    )
    texts = {VERIFICATION: verification.encode(), README: readme.encode()}
    if not pdf:
        return texts
    from audit.evidence import report  # ReportLab: only once the texts could be made

    made = report.trail_report(
        facts=facts,
        verification=verification,
        checkpoint_note=signed.note,
        signed_by=signed.signed_by(bundle_format),
        origin=signed.origin,
        bundle_format=bundle_format,
    )
    return {REPORT: made, **texts}


# Why a matter bundle leaves a trail out, as its README sums them up, by matter format (2 lists
# the matter's trails submitted outside the selection too: its tags let an examiner find them).
_LEFT_OUT_REASONS = {
    1: "still open, or sealed after the checkpoint",
    2: "still open, sealed after the checkpoint, or submitted outside the selection",
    3: "open, sealed after the checkpoint, sealed with no request, or outside the selection: "
    "with --log each is checked against the log",
}


def _matter_descriptive(
    members: dict[str, bytes], trails: list[TrailFacts], bundle_format: int, pdf: bool
) -> dict:
    matter, signed = _json(members, MATTER), signed_of(members)
    selection = selection_of(matter)
    left_out = len(matter["left_out"])
    destroyed = sum(facts.destruction is not None for facts in trails)
    verification = matter_verification(matter, trails, signed, bundle_format)
    readme = fill(
        readme_template("matter_readme", bundle_format),
        dict(
            matter=quoted(matter["matter"]),
            selection=selection,
            trails=len(trails),
            origin=signed.origin,
            tree_size=signed.tree_size,
            left_out=(
                f"\n{left_out} trail(s) of the selection are left out and listed in matter.json "
                f"with the reason ({_LEFT_OUT_REASONS[matter['format_version']]})."
                if left_out
                else ""
            ),
            destroyed=(
                f"\n{destroyed} trail(s) had their texts destroyed under an order; each one's "
                "destruction.json says when and under which."
                if destroyed
                else ""
            ),
            completeness=TEXTS[f"matter_completeness_{matter['format_version']}"],
            verification=verification,
            reportlab=REPORTLAB_VERSION,
        ),
    )
    texts = {VERIFICATION: verification.encode(), README: readme.encode()}
    if not pdf:
        return texts
    from audit.evidence import report

    made = report.matter_report(
        matter=matter,
        selection=selection,
        trails=trails,
        verification=verification,
        checkpoint_note=signed.note,
        signed_by=signed.signed_by(bundle_format),
        origin=signed.origin,
        bundle_format=bundle_format,
    )
    return {REPORT: made, **texts}


def _text(members: dict[str, bytes], name: str) -> str:
    try:
        return members[name].decode("utf-8")
    except (KeyError, UnicodeDecodeError) as exc:
        raise Unreadable(f"{name} is missing or not UTF-8") from exc


def _json(members: dict[str, bytes], name: str) -> dict:
    try:
        value = json.loads(_text(members, name))
    except (ValueError, RecursionError) as exc:
        raise Unreadable(f"{name} is not JSON") from exc
    if not isinstance(value, dict):
        raise Unreadable(f"{name} is not a JSON object")
    return value
