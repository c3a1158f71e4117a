"""The walk page's step in a reviewer's words (issue 45 item 6): the end-of-text token named,
a step that drafted nothing shown as the target's own token (no "bonus" beside it), and a
coupled step that kept its whole draft headed as a bonus, not a correction."""

from reviewers.steps import emitted_tokens, step_present

EOS = 2
PARAMS = {"max_tokens": 8, "temperature": "0.0", "seed": 1, "eos_token_id": EOS}


def payload(drafted, correction, emitted, rule="greedy-argmax") -> dict:
    return {"v": 3, "kind": "decision", "step": 0, "rule": rule, "params": PARAMS,
            "draft": {}, "target": {}, "context_length": 5, "draft_length": len(drafted),
            "drafted": drafted, "accepted_count": sum(d["accepted"] for d in drafted),
            "correction": correction, "emitted": emitted, "stop": "eos"}  # fmt: skip


def test_a_plain_step_is_the_targets_token_and_end_of_text_is_named():
    correction = {"token": EOS, "kind": "argmax-bonus", "u": None, "p": "0.9", "text": ""}
    record = payload([], correction, [EOS])
    step = step_present(record)
    assert step.correction["label"] == "⟨end of text⟩"
    assert step.correction["kind_words"] == "" and "bonus" not in step.correction["how"]
    assert [token["label"] for token in emitted_tokens(record)] == ["⟨end of text⟩"]


def test_a_coupled_step_that_kept_its_draft_ends_with_a_bonus():
    drafted = [{"token": 7, "q": "0.5", "p": "0.5", "ratio": "1", "u": "0.1", "accepted": True,
                "text": "yes"}]  # fmt: skip
    correction = {"token": 9, "kind": "coupled-bonus", "u": "0.3", "p": "0.4", "text": "."}
    step = step_present(payload(drafted, correction, [7, 9], rule="coupled-sampling"))
    assert step.correction["is_bonus"] and step.correction["kind_words"] == "bonus"
    assert step.correction["label"] == "."
    other = {"token": 4, "kind": "coupled", "u": "0.3", "p": "0.4", "text": "no"}
    rejected = [{**drafted[0], "accepted": False}]
    step = step_present(payload(rejected, other, [4], rule="coupled-sampling"))
    assert not step.correction["is_bonus"] and step.correction["kind_words"] == "correction"
