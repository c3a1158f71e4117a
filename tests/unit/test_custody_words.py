"""Every custody action in a reviewer's words, from the detail each writer records
(reviewers/services.py, records.py, destruction.py, custody_chain.py): no shape of a recorded
detail, present or past, may break the custody page."""

import json
from types import SimpleNamespace

import pytest

from reviewers.custody_words import sentence
from reviewers.models import CustodyEvent

Action = CustodyEvent.Action


def event(action: str, detail) -> SimpleNamespace:
    user = SimpleNamespace(get_username=lambda: "rita")
    text = detail if isinstance(detail, str) else json.dumps(detail)
    return SimpleNamespace(action=action, detail=text, user=user)


@pytest.mark.parametrize(
    ("action", "detail", "said"),
    [
        (Action.VIEW, {"step": 3}, "rita viewed step 3 of the trail."),
        (Action.VIEW, {"step": None}, "rita viewed the trail."),
        (Action.VERIFY, {"verification": 7, "ok": True, "records": 12, "failures": 0,
                         "first_failure": None, "checkpoint": 2, "checkpoint_size": 5},
         "rita verified the trail: intact, 12 records checked against the checkpoint over 5 "
         "sealed trails."),
        (Action.VERIFY, {"ok": False, "records": 4, "failures": 1, "first_failure": "seq 2",
                         "checkpoint_size": None},
         "rita verified the trail: BROKEN, 1 failure in 4 records; first: seq 2."),
        (Action.REPLAY, {"replay": "r"}, "rita asked for a replay of the trail."),
        (Action.EXPORT, {"filename": "pathfinder-j.zip", "bytes": 9, "sha256": "ab" * 32},
         "rita downloaded the trail's bundle pathfinder-j.zip (9 bytes, SHA-256 "
         "abababababababab…)."),
        (Action.EXPORT, {"filename": "pathfinder-j.receipt.cose", "bytes": 1, "sha256": "cd" * 32},
         "rita downloaded the trail's receipt pathfinder-j.receipt.cose (1 byte, SHA-256 "
         "cdcdcdcdcdcdcdcd…)."),
        # A production records how many trails it left out (an int); a list is read too.
        (Action.EXPORT_MATTER, {"matter": "M", "since": None, "until": "2026-12-07",
                                "trails": ["a", "b"], "left_out": 3, "tree_size": 9,
                                "filename": "m.zip", "bytes": 5},
         "rita produced matter “M” until 2026-12-07: 2 trails, 3 left out, in m.zip (5 bytes)."),
        (Action.EXPORT_MATTER, {"matter": "M", "batch": "batch_1", "trails": ["a"],
                                "left_out": [], "filename": "b.zip", "bytes": 2},
         "rita produced batch batch_1 of matter “M”: 1 trail, in b.zip (2 bytes)."),
        (Action.ANNOTATE, {"annotation": 1, "step": 0, "text": "ok"},
         "rita annotated step 0: “ok”."),
        (Action.SIGN_OFF, {"sign_off": 1, "verification": 7},
         "rita signed off the trail on verification 7."),
        (Action.LEGAL_HOLD, {"matter": "M", "reason": "Order 5", "run_by": "root@host"},
         "rita (through root@host) placed a legal hold on matter “M”: “Order 5”."),
        (Action.RELEASE_HOLD, {"matter": "M", "reason": "Order 5",
                               "held_since": "2026-12-01T10:00:00.000000+00:00", "run_by": ""},
         "rita released the legal hold on matter “M”, placed 2026-12-01 for “Order 5”."),
        (Action.RETENTION, {"matter": "M", "from": None, "to": 30, "run_by": "admin"},
         "rita (through admin) set matter “M”'s retention from none to 30 days."),
        (Action.DESTROY, {"matter": "M", "order": "PO 12", "jobs": ["j"], "trails": ["t"],
                          "files": ["f", "g"], "replays": 0, "batch_lines": 0,
                          "tokens_kept_in_records": [], "run_by": ""},
         "rita destroyed the texts of matter “M” under the order “PO 12”: 1 job, 1 trail, "
         "2 files; the proofs were kept."),
    ],
)  # fmt: skip
def test_each_recorded_detail_reads_as_a_sentence(action, detail, said):
    assert sentence(event(action, detail)) == said


@pytest.mark.parametrize("detail", ["", "not json", "[1, 2]", {"step": "x"}])
def test_a_detail_of_no_known_shape_still_reads(detail):
    assert sentence(event(Action.VIEW, detail)).startswith("rita viewed")
