"""The generation parameters are declared once (decoding.engine.params: each field of
GenerationParams with its Bounds), and every door refuses what that declaration refuses: the
native API, the OpenAI API, the engine itself, `manage.py generate`. The copies that must stay
copies (the job's columns, the record format an examiner reads without our code) are held to it
here, so a parameter added in one place and not the others fails."""

import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.evidence.decision_rule import DECISION_PARAMS
from decoding.engine import PARAM_NAMES, GenerationParams, bounds_of, params_payload
from decoding.models import GenerationJob
from decoding.protocol.native_input import GenerationInput
from decoding.protocol.openai_input import OPENAI_PARAMS, CompletionInput
from tests.independent import verify_from_doc

REPO = Path(__file__).resolve().parents[2]


def out_of_bounds(name):
    """Values just outside the parameter's declared bounds, and the wrong kinds."""
    bounds = bounds_of()[name]
    step = 1 if bounds.kind is int else 0.001
    values = [bounds.least - step, True, "5"]
    if bounds.above:
        values.append(bounds.least)
    if bounds.most is not None:
        values.append(bounds.most + step)
    if bounds.kind is int:
        values.append(bounds.least + 0.5)
    if not bounds.nullable:
        values.append(None)
    return values


def within_bounds(name):
    bounds = bounds_of()[name]
    values = [bounds.most if bounds.most is not None else bounds.least + 3]
    if not bounds.above:
        values.append(bounds.least)
    return values


def native_refuses(name, value) -> bool:
    shape = GenerationInput(data={"prompt": "Hi", name: value})
    return not shape.is_valid() and list(shape.errors) == [name]


@pytest.mark.parametrize("name", PARAM_NAMES)
def test_every_door_refuses_what_the_declaration_refuses_and_takes_what_it_takes(name):
    for value in out_of_bounds(name):
        assert native_refuses(name, value), (name, value)
        with pytest.raises(ValueError, match=name):
            GenerationParams(**{name: value})
        if name in OPENAI_PARAMS and value is not None:  # OpenAI's null is "the default"
            shape = CompletionInput(data={"model": "m", "prompt": "Hi", name: value})
            assert not shape.is_valid() and name in shape.errors, (name, value)
    for value in within_bounds(name):
        assert not native_refuses(name, value), (name, value)
        assert getattr(GenerationParams(**{name: value}), name) == value


def test_the_command_line_takes_every_parameter_and_refuses_as_the_api_does():
    with pytest.raises(CommandError, match="top_p: Ensure this value is greater than 0"):
        call_command("generate", "--prompt", "Hi", "--top-p", "0")
    with pytest.raises(CommandError, match="eos_token_id: Ensure this value is greater than or"):
        call_command("generate", "--prompt", "Hi", "--eos-token-id", "-1")


def test_each_parameter_is_a_job_column_of_its_kind():
    for name, bounds in bounds_of().items():
        column = GenerationJob._meta.get_field(name)
        assert column.null == bounds.nullable, name
        assert column.get_internal_type().endswith(
            "FloatField" if bounds.kind is float else "IntegerField"
        ), name


def test_the_record_format_names_exactly_the_declared_parameters():
    """An examiner's verifier checks `params` against the format's own list (the spec, which
    imports nothing of ours), and the records are written from the declaration."""
    assert set(params_payload(GenerationParams())) == DECISION_PARAMS == set(PARAM_NAMES)
    assert verify_from_doc.DECISION_PARAMS == DECISION_PARAMS
    script = (REPO / "reviewers/static/reviewers/decision-rule.js").read_text()
    (listed,) = re.findall(r"const PARAMS = (\[.*?\]);", script)
    assert json.loads(listed) == sorted(DECISION_PARAMS)  # the portal's verifier's copy
