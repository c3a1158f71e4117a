"""The PDF a court reads: made from the same data as the bundle it travels in (the records,
the disclosed texts, the verification, the checkpoint), with ReportLab in invariant mode (no
creation date, no random document id), so the same bundle always carries the same bytes.

Only the PDF standard fonts are used (Helvetica, Courier: nothing to embed, the same on every
machine). A character they cannot show is written as <U+XXXX>; prompt.txt and answer.txt hold
the exact texts.
"""

from __future__ import annotations

import io
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import LETTER
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import inch
from reportlab.platypus import (
    KeepTogether,
    PageBreak,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from audit.evidence.bundle_format import RECEIPTS_SINCE
from audit.evidence.trail_facts import TrailFacts

_STYLES = getSampleStyleSheet()
BODY = ParagraphStyle("body", parent=_STYLES["BodyText"], fontName="Helvetica", fontSize=9.5)
TEXT = ParagraphStyle("text", parent=BODY, fontName="Courier", fontSize=8, leading=10)
HASH = ParagraphStyle("hash", parent=BODY, fontName="Courier", fontSize=7, leading=9)
H1 = ParagraphStyle("h1", parent=_STYLES["Heading1"], fontName="Helvetica-Bold", fontSize=16)
H2 = ParagraphStyle("h2", parent=_STYLES["Heading2"], fontName="Helvetica-Bold", fontSize=12)
H3 = ParagraphStyle("h3", parent=_STYLES["Heading3"], fontName="Helvetica-Bold", fontSize=10)


def _described(model: dict) -> str:
    """A model's revision, its file type where the record states one, and its runtime."""
    parts = [model.get("revision", ""), model.get("file_type", ""), model.get("runtime", "")]
    if not parts[1]:
        del parts[1]  # records kept no file type before it was added: the report stays as it was
    else:
        parts[1] = f"file type {parts[1]}"
    return " · ".join(parts)


def _shown(text: str) -> str:
    """`text` for a Paragraph: XML-escaped, newlines kept, characters the standard fonts
    (Windows-1252) cannot draw written as <U+XXXX>."""
    out = []
    for char in text:
        try:
            char.encode("cp1252")
            out.append(char)
        except UnicodeEncodeError:
            out.append(f"<U+{ord(char):04X}>")
    return escape("".join(out)).replace("\n", "<br/>")


def _table(rows: list[tuple], widths: list[float]) -> Table:
    cells = [[Paragraph(_shown(str(a)), BODY), Paragraph(_shown(str(b)), BODY)] for a, b in rows]
    table = Table(cells, colWidths=widths)
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("BACKGROUND", (0, 0), (0, -1), colors.whitesmoke),
            ]
        )
    )
    return table


def _decisions(facts: TrailFacts) -> str:
    """What the report says of a trail's decisions: counts only of the steps the bundle opens."""
    stop = f"stop: {facts.stop or 'none'}"
    if facts.sealed_steps == facts.steps and facts.steps:
        return f"{facts.steps} steps, their workings sealed (not counted); {stop}"
    rate = f"{facts.accepted / facts.drafted:.1%}" if facts.drafted else "n/a"
    sealed = ""
    if facts.sealed_steps:
        sealed = f" ({facts.sealed_steps} of them with their workings sealed, not counted)"
    return (
        f"{facts.steps} steps{sealed}; {facts.drafted} tokens drafted, {facts.accepted} "
        f"accepted ({rate}); tokens served: {facts.tokens['draft']} accepted draft, "
        f"{facts.tokens['correction']} corrections, {facts.tokens['bonus']} bonus, "
        f"{facts.tokens['target']} from plain target steps (nothing drafted); {stop}"
    )


def _trail_section(facts: TrailFacts, bundle_format: int) -> list:
    status = "ABANDONED attempt (its worker was lost)" if facts.abandoned else facts.outcome
    rows = [
        ("Job", facts.job_id),
        ("Attempt", f"{facts.attempt} ({status})"),
        ("Ledger entry", facts.leaf_index),
        ("Records", facts.record_count),
        ("Decision rule", ", ".join(facts.rules) or "none"),
        ("Decisions", _decisions(facts)),
        ("Parameters", ", ".join(f"{k}={v}" for k, v in sorted(facts.params.items()))),
    ]
    destroyed = facts.destruction
    if bundle_format >= RECEIPTS_SINCE:  # the rows earlier formats' reports were made without
        rows += [
            ("Direction", facts.direction_said()),
            (
                "Destroyed",
                f"on {destroyed['destroyed_at']} under the order: {destroyed['order']}"
                if destroyed
                else "no",
            ),
            ("Receipt", "receipt.cose (RFC 9942)" if facts.receipt else "none"),
        ]
    flow = [
        Paragraph(_shown(f"Trail {facts.trail_id}"), H2),
        _table(rows, [1.4 * inch, 5.1 * inch]),
        Spacer(1, 4),
        Paragraph("Chain head (SHA-256)", H3),
        Paragraph(facts.head_hash, HASH),
    ]
    for role in ("target", "draft"):
        model = facts.models.get(role) or {}
        flow += [
            Paragraph(_shown(f"{role.title()} model: {model.get('name', '?')}"), H3),
            Paragraph(_shown(_described(model)), BODY),
            Paragraph(f"SHA-256 {escape(str(model.get('sha256', '')))}", HASH),
        ]
    question = facts.question if facts.question is not None else "(withheld, or not bound)"
    answer = facts.answer if facts.answer is not None else "(withheld, or no answer was served)"
    if destroyed and bundle_format >= RECEIPTS_SINCE:
        question = answer = f"(destroyed on {destroyed['destroyed_at']})"
    flow += [
        Paragraph("Question (the prompt exactly as the model saw it)", H3),
        Paragraph(_shown(question), TEXT),
        Paragraph("Answer (the output text exactly as served)", H3),
        Paragraph(_shown(answer), TEXT),
    ]
    return flow


def _certification(*, origin: str, scope: str, count: int, checkpoint_note: str) -> list:
    first_lines = checkpoint_note.split("\n")
    size, root = (first_lines[1], first_lines[2]) if len(first_lines) > 2 else ("?", "?")
    blank = "______________________"
    paragraphs = [
        f"I, {blank} [name], declare under penalty of perjury under the laws of the United "
        "States of America that:",
        f"1. I am employed by {blank} [organisation] as {blank} [title], and I am a custodian "
        f"of, or am otherwise qualified to certify, the records of the Pathfinder inference "
        f'service identified as log "{origin}".',
        f"2. This report and the bundle it travels in hold {scope}: {count} audit trail(s), "
        "each a hash chain of records generated by an electronic process that produces an "
        "accurate result: every record was committed to an append-only store before any "
        "token it describes was released, and each sealed trail is a leaf of a Merkle tree "
        f"whose size ({size}) and root (base64 {root}) are stated by the signed checkpoint "
        "quoted above (FRE 902(13)).",
        "3. The files of the bundle were copied from that store by a process of digital "
        "identification: manifest.json lists the SHA-256 hash of every file, and each "
        "trail's inclusion proof leads to the checkpoint's root, which anyone can check with "
        "python -m audit.offline_verify and the log's published key (FRE 902(14)).",
        "4. The records were made at or near the time of the events they describe, by the "
        "service in the course of its regularly conducted activity, as a regular practice.",
        f"Executed on {blank} [date] at {blank} [place].",
        f"Signature: {blank}",
    ]
    return [
        Paragraph("Certification (Federal Rules of Evidence 902(13) and 902(14))", H2),
        *(Paragraph(_shown(p), BODY) for p in paragraphs),
    ]


def _pdf(flow: list, title: str) -> bytes:
    out = io.BytesIO()
    # invariant=1: a fixed creation date and document id, so equal input gives equal bytes.
    doc = SimpleDocTemplate(
        out,
        pagesize=LETTER,
        invariant=1,
        title=title,
        author="Pathfinder",
        creator="Pathfinder",
        producer="Pathfinder (ReportLab)",
        subject="",
        keywords="",
        leftMargin=inch,
        rightMargin=inch,
        topMargin=0.8 * inch,
        bottomMargin=0.8 * inch,
    )
    doc.build(flow)
    return out.getvalue()


def matter_report(
    *,
    matter: dict,
    selection: str,
    trails: list[TrailFacts],
    verification: str,
    checkpoint_note: str,
    signed_by: str,
    origin: str,
    bundle_format: int,
) -> bytes:
    """The report of a matter bundle: a summary, the verification, the checkpoint and its
    cosignatures, every trail, then the certification template."""
    abandoned = sum(1 for t in trails if t.abandoned)
    flow = [
        Paragraph(_shown(f"Pathfinder evidence report: {matter['matter']}"), H1),
        Paragraph(_shown(f"This bundle holds {selection}."), BODY),
        _table(
            [
                ("Log", origin),
                ("Trails", f"{len(trails)} ({abandoned} abandoned attempt(s) included, marked)"),
                ("Left out", f"{len(matter['left_out'])} (listed in matter.json with the reason)"),
                ("Checkpoint", f"tree of {matter['tree_size']} trails"),
            ],
            [1.4 * inch, 5.1 * inch],
        ),
        Paragraph("Verification at export", H2),
        Paragraph(_shown(verification), TEXT),
        KeepTogether(
            [
                Paragraph("Checkpoint (signed note) and its signers", H2),
                Paragraph(_shown(checkpoint_note), HASH),
                Paragraph(_shown("Signed by: " + signed_by), BODY),
            ]
        ),
    ]
    for facts in trails:
        flow += [PageBreak(), *_trail_section(facts, bundle_format)]
    flow += [PageBreak()]
    flow += _certification(
        origin=origin, scope=selection, count=len(trails), checkpoint_note=checkpoint_note
    )
    return _pdf(flow, f"Pathfinder evidence report: {matter['matter']}")


def trail_report(
    *,
    facts: TrailFacts,
    verification: str,
    checkpoint_note: str,
    signed_by: str,
    origin: str,
    bundle_format: int,
) -> bytes:
    """The report of a one-trail bundle: the trail, the verification, the checkpoint and its
    signers, then the certification template."""
    flow = [
        Paragraph(_shown(f"Pathfinder evidence report: trail {facts.trail_id}"), H1),
        *_trail_section(facts, bundle_format)[1:],
        Paragraph("Verification at export", H2),
        Paragraph(_shown(verification), TEXT),
        Paragraph("Checkpoint (signed note) and its signers", H2),
        Paragraph(_shown(checkpoint_note), HASH),
        Paragraph(_shown("Signed by: " + signed_by), BODY),
        PageBreak(),
        *_certification(
            origin=origin,
            scope=f"trail {facts.trail_id} of job {facts.job_id}",
            count=1,
            checkpoint_note=checkpoint_note,
        ),
    ]
    return _pdf(flow, f"Pathfinder evidence report: trail {facts.trail_id}")
