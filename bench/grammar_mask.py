"""What a grammar costs a speculative step: four JSON-Schema grammar libraries side by side.

Issue 44 (structured outputs, ADR 0031): for each step the engine needs, at k + 1 consecutive
positions, the set of tokens the grammar allows over the target's whole vocabulary (SmolLM2-135M:
49,152 tokens), after the context plus each drafted prefix. This measures, on this CPU and in
one run, for each candidate:

- llama.cpp's own grammars (GBNF from llama-cpp-python's `json_schema_to_gbnf`, applied by
  `llama_sampler_init_grammar` / `llama_sampler_apply` to all 49,152 candidates), in the
  project's interpreter;
- llguidance, in the project's interpreter (its wheel unpacked beside it with `--llguidance-path`,
  the tokenizer made from the engine's own `llama_vocab` by `llguidance.llamacpp`);
- xgrammar and outlines-core, in a separate virtual environment (`--gvenv`), their tokenizers made
  from the same token bytes the engine's vocabulary gives.

For each schema (`SCHEMAS`: eight a legal-review pipeline would send, four of them held out:
written with the rest before any figure was seen, left out while the bench was written), a
valid document is tokenized by llama.cpp and walked token by token through each library: a
full-vocabulary mask is computed and timed at every position (the document's next token, and
EOS at the end, must be allowed), then the token is consumed (timed). Each schema is compiled
afresh `--reps` times (timed), with one walk per compile. A second walk times a speculative step
at every position: the masks of k + 1 positions along the k next tokens of the document
(k = 4), with the state advanced and rolled back (or, for llama.cpp, which cannot roll back, a
clone advanced and dropped), and alone a fork and a rollback of k. `FEATURES` checks coverage:
each JSON-Schema feature compiled, its valid instance accepted and its invalid one refused.

The baseline is one decode step of the served model (the shipped file requantized to Q8_0, as
a default spec serves it; 2 threads): the time of `eval` of one token after a short prompt, and
of verify passes of k + 1 = 5 and 9 positions, measured before and after the libraries.

    .venv/bin/python bench/grammar_mask.py --gvenv /tmp/gvenv/bin/python \\
        --llguidance-path /tmp/llg_only    # ~3 min once quiet; bench/results/grammar-mask-<date>.*

The environments (xgrammar imports torch and transformers; its `triton` requirement is left out,
a CPU run never loads it; llguidance needs nothing but itself):

    python3 -m venv /tmp/gvenv
    /tmp/gvenv/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /tmp/gvenv/bin/pip install outlines-core==0.2.14 numpy transformers==5.25.0 \\
        tokenizers==0.23.3 pydantic 'apache-tvm-ffi>=0.1.11' typing-extensions
    /tmp/gvenv/bin/pip install --no-deps xgrammar==0.2.9
    /tmp/gvenv/bin/pip install --no-deps --target /tmp/llg_only llguidance==1.9.1

The script is also each library's sub-command (`lib --lib NAME`), run under its interpreter.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
K = 4  # drafted tokens per speculative step: masks at k + 1 positions
LIBS = ("llamacpp", "llguidance", "xgrammar", "outlines")
LIB_NAMES = {
    "llamacpp": "llama.cpp GBNF",
    "llguidance": "llguidance",
    "xgrammar": "xgrammar",
    "outlines": "outlines-core",
}

# --------------------------------------------------------------------------------------------
# Schemas and the documents a model would write for them. All eight were written together,
# before any figure; the held-out four were never run until the committed run.

DATE = {"type": "string", "format": "date"}
DOCKET = "^[0-9]{1,2}:[0-9]{2}-(cv|cr)-[0-9]{5}(-[A-Z]{2,3})?$"


def _obj(properties: dict, required: list[str] | None = None) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


SCHEMAS: dict[str, dict] = {
    "clause_parties": {
        "heldout": False,
        "what": "parties with roles (enum), effective date (format date), governing law",
        "schema": _obj(
            {
                "clause": {"type": "string"},
                "parties": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 6,
                    "items": _obj(
                        {
                            "name": {"type": "string"},
                            "role": {
                                "type": "string",
                                "enum": [
                                    "licensor",
                                    "licensee",
                                    "contributor",
                                    "recipient",
                                    "other",
                                ],
                            },
                        }
                    ),
                },
                "effective_date": DATE,
                "governing_law": {"type": "string"},
            }
        ),
        "document": {
            "clause": "2. Grant of Copyright License",
            "parties": [
                {"name": "Acme Software Foundation", "role": "licensor"},
                {"name": "Northwind Traders Ltd.", "role": "licensee"},
            ],
            "effective_date": "2024-03-01",
            "governing_law": "the laws of the State of Delaware, United States",
        },
    },
    "obligations": {
        "heldout": False,
        "what": "array (1-10) of obligations: party, action, deadline (date), conditional",
        "schema": _obj(
            {
                "obligations": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 10,
                    "items": _obj(
                        {
                            "party": {"type": "string"},
                            "action": {"type": "string"},
                            "deadline": DATE,
                            "conditional": {"type": "boolean"},
                        }
                    ),
                }
            }
        ),
        "document": {
            "obligations": [
                {
                    "party": "Licensee",
                    "action": "deliver the source code of all Modifications to the Licensor",
                    "deadline": "2025-01-31",
                    "conditional": False,
                },
                {
                    "party": "Licensor",
                    "action": "notify the Licensee in writing of any third-party patent claim",
                    "deadline": "2025-02-14",
                    "conditional": True,
                },
                {
                    "party": "Licensee",
                    "action": "cease all distribution of the Covered Software",
                    "deadline": "2025-06-30",
                    "conditional": True,
                },
            ]
        },
    },
    "classification": {
        "heldout": False,
        "what": "label (enum of 7), confidence (number 0..1), rationale (maxLength 300)",
        "schema": _obj(
            {
                "label": {
                    "type": "string",
                    "enum": [
                        "indemnification",
                        "limitation_of_liability",
                        "termination",
                        "confidentiality",
                        "governing_law",
                        "assignment",
                        "other",
                    ],
                },
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "rationale": {"type": "string", "maxLength": 300},
            }
        ),
        "document": {
            "label": "limitation_of_liability",
            "confidence": 0.87,
            "rationale": "The clause excludes indirect, special and consequential damages and "
            "caps each party's aggregate liability at the fees paid in the prior twelve months.",
        },
    },
    "json_object": {
        "heldout": False,
        "what": 'response_format json_object: any JSON object ({"type": "object"})',
        "schema": {"type": "object"},
        "document": {
            "summary": "Mutual NDA; two-year term, no non-solicitation clause.",
            "issues": [
                {"section": "4.2", "severity": "high", "note": "no carve-out for prior knowledge"},
                {"section": "7", "severity": "low", "note": None},
            ],
            "signed": True,
            "term_months": 24,
        },
    },
    "defined_types": {
        "heldout": True,
        "what": "$defs/$ref: two parties and terms of one defined type, renewals (maxItems 3)",
        "schema": {
            "$defs": {
                "party": _obj(
                    {
                        "name": {"type": "string"},
                        "jurisdiction": {"type": "string"},
                        "entity_type": {
                            "type": "string",
                            "enum": [
                                "corporation",
                                "llc",
                                "partnership",
                                "individual",
                                "government",
                            ],
                        },
                    }
                ),
                "term": _obj({"start": DATE, "end": DATE}),
            },
            **_obj(
                {
                    "licensor": {"$ref": "#/$defs/party"},
                    "licensee": {"$ref": "#/$defs/party"},
                    "initial_term": {"$ref": "#/$defs/term"},
                    "renewals": {"type": "array", "items": {"$ref": "#/$defs/term"}, "maxItems": 3},
                }
            ),
        },
        "document": {
            "licensor": {
                "name": "Helios Data GmbH",
                "jurisdiction": "Germany",
                "entity_type": "corporation",
            },
            "licensee": {
                "name": "Bramble & Finch LLP",
                "jurisdiction": "England and Wales",
                "entity_type": "partnership",
            },
            "initial_term": {"start": "2024-07-01", "end": "2026-06-30"},
            "renewals": [{"start": "2026-07-01", "end": "2027-06-30"}],
        },
    },
    "remedy_anyof": {
        "heldout": True,
        "what": "anyOf of three remedy objects told apart by a const, integer and number bounds",
        "schema": _obj(
            {
                "clause_ref": {"type": "string"},
                "remedy": {
                    "anyOf": [
                        _obj(
                            {
                                "kind": {"const": "termination"},
                                "notice_days": {"type": "integer", "minimum": 0, "maximum": 365},
                            }
                        ),
                        _obj(
                            {
                                "kind": {"const": "damages"},
                                "cap_amount": {"type": "number", "minimum": 0},
                                "currency": {"type": "string", "enum": ["USD", "EUR", "GBP"]},
                            }
                        ),
                        _obj({"kind": {"const": "injunction"}, "court": {"type": "string"}}),
                    ]
                },
            }
        ),
        "document": {
            "clause_ref": "12.3",
            "remedy": {"kind": "damages", "cap_amount": 250000, "currency": "EUR"},
        },
    },
    "docket_pattern": {
        "heldout": True,
        "what": "docket numbers by pattern (one and an array of up to 3), court, filing date",
        "schema": _obj(
            {
                "docket": {"type": "string", "pattern": DOCKET},
                "court": {"type": "string"},
                "filed": DATE,
                "judge": {"type": "string"},
                "related": {
                    "type": "array",
                    "items": {"type": "string", "pattern": DOCKET},
                    "maxItems": 3,
                },
            }
        ),
        "document": {
            "docket": "1:23-cv-04567-JMF",
            "court": "United States District Court for the Southern District of New York",
            "filed": "2023-05-24",
            "judge": "Hon. Alma B. Castellanos",
            "related": ["1:22-cv-10011", "1:23-cr-00321-LAK"],
        },
    },
    "finding_oneof": {
        "heldout": True,
        "what": "nested finding with cited sections (pattern), oneOf recommendation, 1..5",
        "schema": _obj(
            {
                "finding": _obj(
                    {
                        "severity": {
                            "type": "string",
                            "enum": ["blocker", "major", "minor", "note"],
                        },
                        "issue": {"type": "string"},
                        "citations": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 4,
                            "items": _obj(
                                {
                                    "section": {
                                        "type": "string",
                                        "pattern": "^[0-9]+(\\.[0-9]+)*$",
                                    },
                                    "quote": {"type": "string"},
                                }
                            ),
                        },
                    }
                ),
                "recommendation": {
                    "oneOf": [
                        _obj({"action": {"const": "accept"}}),
                        _obj(
                            {
                                "action": {"const": "redline"},
                                "replacement_text": {"type": "string"},
                            }
                        ),
                    ]
                },
                "reviewer_confidence": {"type": "integer", "minimum": 1, "maximum": 5},
            }
        ),
        "document": {
            "finding": {
                "severity": "major",
                "issue": "The indemnity is uncapped and survives termination without limit.",
                "citations": [
                    {
                        "section": "9.1",
                        "quote": "Licensee shall indemnify Licensor against all claims arising "
                        'from "use of the Software" (see § 9.1).',
                    },
                    {"section": "14.2.3", "quote": "Sections 9 and 11 survive termination."},
                ],
            },
            "recommendation": {
                "action": "redline",
                "replacement_text": "Cap the indemnity at twelve months' fees; survival 3 years.",
            },
            "reviewer_confidence": 4,
        },
    },
}


class Raw(str):
    """An instance given as text, not as a value: JSON that json.dumps would never write."""


# Coverage: one feature each, a valid instance and one the schema forbids (valid JSON, but for
# the raw control character, which JSON forbids inside a string).
FEATURES: list[tuple[str, dict, object, object]] = [
    ("required", _obj({"a": {"type": "string"}, "b": {"type": "string"}}), {"a": "x", "b": "y"},
     {"a": "x"}),
    ("additionalProperties false", _obj({"a": {"type": "string"}}), {"a": "x"},
     {"a": "x", "z": 1}),
    ("optional property", _obj({"a": {"type": "string"}, "b": {"type": "integer"}}, ["a"]),
     {"a": "x"}, {"b": 1}),
    ("nested objects", _obj({"o": _obj({"i": _obj({"v": {"type": "string"}})})}),
     {"o": {"i": {"v": "x"}}}, {"o": {"i": {"v": 5}}}),
    ("array minItems", _obj({"l": {"type": "array", "items": {"type": "string"}, "minItems": 2}}),
     {"l": ["a", "b"]}, {"l": ["a"]}),
    ("array maxItems", _obj({"l": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}),
     {"l": ["a", "b", "c"]}, {"l": ["a", "b", "c", "d"]}),
    ("enum", _obj({"e": {"type": "string", "enum": ["alpha", "beta"]}}), {"e": "beta"},
     {"e": "gamma"}),
    ("const", _obj({"c": {"const": "fixed"}}), {"c": "fixed"}, {"c": "other"}),
    ("anyOf", _obj({"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}), {"v": 3},
     {"v": True}),
    ("oneOf", _obj({"v": {"oneOf": [_obj({"k": {"const": "a"}}), _obj({"k": {"const": "b"}})]}}),
     {"v": {"k": "b"}}, {"v": {"k": "c"}}),
    ("$ref/$defs", {"$defs": {"p": _obj({"n": {"type": "string"}})},
                    **_obj({"x": {"$ref": "#/$defs/p"}, "y": {"$ref": "#/$defs/p"}})},
     {"x": {"n": "a"}, "y": {"n": "b"}}, {"x": {"n": "a"}, "y": {"m": "b"}}),
    ("recursive $ref", {"$defs": {"node": _obj({"name": {"type": "string"}, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}}})}, "$ref": "#/$defs/node"},
     {"name": "1", "children": [{"name": "1.1", "children": [{"name": "1.1.1", "children": []}]}]},
     {"name": "1", "children": [{"name": "1.1"}]}),
    ("pattern", _obj({"d": {"type": "string", "pattern": "^[0-9]{2}-cv-[0-9]{5}$"}}),
     {"d": "23-cv-04567"}, {"d": "23-cv-4567"}),
    ("pattern with an escape (\\.)",
     _obj({"s": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)*$"}}), {"s": "14.2.3"},
     {"s": "14..2"}),
    ("format date", _obj({"d": {"type": "string", "format": "date"}}), {"d": "2024-02-29"},
     {"d": "2024-13-01"}),
    ("format date-time", _obj({"d": {"type": "string", "format": "date-time"}}),
     {"d": "2024-02-29T13:45:00Z"}, {"d": "2024-02-29 13:45"}),
    ("number minimum/maximum", _obj({"n": {"type": "number", "minimum": 0, "maximum": 1}}),
     {"n": 0.75}, {"n": 1.5}),
    ("integer minimum/maximum", _obj({"n": {"type": "integer", "minimum": 1, "maximum": 5}}),
     {"n": 4}, {"n": 7}),
    ("string escapes", _obj({"s": {"type": "string"}}), {"s": 'a "quoted" word\\n'},
     Raw('{"s": "a\x01b"}')),
    ("string escapes, with maxLength", _obj({"s": {"type": "string", "maxLength": 40}}),
     {"s": 'a "quoted" word\\n'}, Raw('{"s": "a\x01b"}')),
    ("string minLength/maxLength",
     _obj({"s": {"type": "string", "minLength": 2, "maxLength": 5}}), {"s": "abcd"},
     {"s": "abcdefgh"}),
    ('type ["string", "null"]', _obj({"s": {"type": ["string", "null"]}}), {"s": None},
     {"s": 1}),
    ("json_object", {"type": "object"}, {"a": [1, {"b": None}], "c": {"d": "e"}}, [1, 2]),
]  # fmt: skip


def document_text(document: object) -> str:
    """As json.dumps writes it: ", " and ": " between items, one line, UTF-8 kept."""
    if isinstance(document, Raw):
        return str(document)
    return json.dumps(document, ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# Preparation, in the project's interpreter: the vocabulary and the documents' tokens.


def _project_imports() -> None:
    sys.path.insert(0, str(ROOT))


def cmd_prepare(args) -> None:
    """The target's vocabulary as bytes, which tokens are special, and every document's tokens,
    all from llama.cpp's own tokenizer of the shipped GGUF."""
    _project_imports()
    import llama_cpp

    from decoding.engine.weights import default_gguf_path

    path = default_gguf_path()
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    buffer = ctypes.create_string_buffer(16 * 1024 + 1)
    pieces, special = [], []
    for token in range(n_vocab):
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, 16 * 1024, 0, True)
        piece = bytes(buffer[:n])
        attr = llama_cpp.llama_vocab_get_attr(vocab, token)
        # As llguidance.llamacpp decides: control tokens, and user-defined ones like <...>.
        is_special = bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL) or (
            bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED)
            and piece.startswith(b"<")
            and piece.endswith(b">")
        )
        pieces.append(piece.hex())
        special.append(is_special)

    def tokens(value: object) -> list[int]:
        text = document_text(value)
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        assert llm.detokenize(ids).decode() == text, text
        return ids

    out = {
        "gguf": str(path),
        "n_vocab": n_vocab,
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "pieces": pieces,
        "special": [i for i, s in enumerate(special) if s],
        "schemas": {
            name: {
                **spec,
                "text": document_text(spec["document"]),
                "tokens": tokens(spec["document"]),
            }
            for name, spec in SCHEMAS.items()
        },
        "features": [
            {"name": name, "schema": schema, "valid": tokens(valid), "invalid": tokens(invalid)}
            for name, schema, valid, invalid in FEATURES
        ],
    }
    Path(args.out).write_text(json.dumps(out))


def cmd_model(args) -> None:
    """One decode step of the served file: eval of 1 token, and verify passes of k + 1 and 2k + 1
    positions, after a short prompt, interleaved round by round."""
    _project_imports()
    import llama_cpp

    from decoding.engine.model_files import requantized
    from decoding.engine.weights import default_gguf_path

    path = requantized(default_gguf_path(), Path(args.model_cache), "Q8_0").path
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=2, verbose=False)
    prompt = llm.tokenize(
        b"Extract the parties, the effective date and the governing law of this clause as JSON. "
        b"This Agreement is made between Acme Software Foundation and Northwind Traders Ltd.",
        add_bos=False,
    )
    continuation = llm.tokenize(document_text(SCHEMAS["obligations"]["document"]).encode())
    llm.eval(prompt)
    start = llm.n_tokens
    sizes = (1, K + 1, 2 * K + 1)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    rng = random.Random(0)
    for _ in range(5):  # warm-up
        llm.n_tokens = start
        llm.eval(continuation[:1])
    for _ in range(args.rounds):
        order = list(sizes)
        rng.shuffle(order)
        for n in order:
            llm.n_tokens = start  # eval drops the cache cells from n_tokens on
            t0 = time.perf_counter()
            llm.eval(continuation[:n])
            times[n].append(time.perf_counter() - t0)
    # What the engine adds per position with a bitmask library: the mask applied to the logits.
    n_vocab = llm.n_vocab()
    logits = np.random.default_rng(0).standard_normal(n_vocab).astype(np.float32)
    words = np.random.default_rng(1).integers(0, 2**32, (n_vocab + 31) // 32, dtype=np.uint32)
    apply_s = []
    for _ in range(200):
        target = logits.copy()
        t0 = time.perf_counter()
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:n_vocab]
        target[bits == 0] = -np.inf
        apply_s.append(time.perf_counter() - t0)
    Path(args.out).write_text(
        json.dumps(
            {
                "bitmask_apply_s": float(np.median(apply_s)),
                "gguf": str(path),
                "n_threads": 2,
                "prompt_tokens": start,
                "rounds": args.rounds,
                "seconds": {str(n): v for n, v in times.items()},
                "llama_cpp": llama_cpp.__version__,
            }
        )
    )


# --------------------------------------------------------------------------------------------
# The libraries, one adapter each. `mask` is the timed part; `before_mask` readies a buffer.


def _bits(words: np.ndarray, n_vocab: int) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:n_vocab].astype(bool)


class Bitmask:
    """A 32-bit-word bitmask per position, as llguidance, xgrammar and outlines-core write."""

    def __init__(self, n_vocab: int, rows: int = K + 1) -> None:
        self.n_vocab = n_vocab
        self.words = np.zeros((rows, (n_vocab + 31) // 32), dtype=np.int32)

    def before_mask(self, row: int = 0) -> None:
        pass

    def allowed(self, row: int = 0) -> np.ndarray:
        return _bits(self.words[row], self.n_vocab)


class LlamaCpp(Bitmask):
    name = "llamacpp"

    def __init__(self, prep: dict) -> None:
        import llama_cpp
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        self.lc, self.to_gbnf = llama_cpp, json_schema_to_gbnf
        self.version = llama_cpp.__version__
        t0 = time.perf_counter()
        self.llm = llama_cpp.Llama(model_path=prep["gguf"], vocab_only=True, verbose=False)
        self.vocab = self.llm._model.vocab
        self.setup_s = time.perf_counter() - t0
        self.n_vocab = prep["n_vocab"]
        dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        self.rows = []
        for _ in range(K + 1):
            data = np.zeros(self.n_vocab, dtype=dtype)
            data["id"] = np.arange(self.n_vocab)
            array = llama_cpp.llama_token_data_array(
                data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
                size=self.n_vocab,
                selected=-1,
                sorted=False,
            )
            self.rows.append((data, array))

    def compile(self, schema: dict):
        gbnf = self.to_gbnf(json.dumps(schema))
        sampler = self.lc.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        if not sampler:
            raise ValueError("llama_sampler_init_grammar refused the GBNF")
        return sampler

    def free(self, sampler) -> None:
        self.lc.llama_sampler_free(sampler)

    def before_mask(self, row: int = 0) -> None:
        data, array = self.rows[row]
        data["logit"] = 0.0
        data["id"] = np.arange(self.n_vocab)
        array.size, array.selected, array.sorted = self.n_vocab, -1, False

    def mask(self, sampler, row: int = 0) -> None:
        self.lc.llama_sampler_apply(sampler, ctypes.byref(self.rows[row][1]))

    def allowed(self, row: int = 0) -> np.ndarray:
        return np.isfinite(self.rows[row][0]["logit"])

    def advance(self, sampler, token: int) -> bool:
        # Only ever called with a token the mask allowed: accepting a refused one throws in C++.
        self.lc.llama_sampler_accept(sampler, token)
        return True

    def fork(self, sampler):
        return self.lc.llama_sampler_clone(sampler)

    rollback = None  # no rollback: a step advances a clone and drops it

    def spec_step(self, sampler, draft: list[int]) -> float:
        for row in range(len(draft) + 1):
            self.before_mask(row)
        t0 = time.perf_counter()
        clone = self.lc.llama_sampler_clone(sampler)
        for row in range(len(draft) + 1):
            self.mask(clone, row)
            if row < len(draft):
                self.lc.llama_sampler_accept(clone, draft[row])
        self.lc.llama_sampler_free(clone)
        return time.perf_counter() - t0


class LLGuidance(Bitmask):
    name = "llguidance"

    def __init__(self, prep: dict) -> None:
        import llama_cpp
        import llguidance
        import llguidance.numpy as llnp
        from llguidance.llamacpp import lltokenizer_from_vocab

        self.llg, self.llnp = llguidance, llnp
        self.version = llguidance.get_version() if hasattr(llguidance, "get_version") else "?"
        llm = llama_cpp.Llama(model_path=prep["gguf"], vocab_only=True, verbose=False)
        self._llm = llm
        t0 = time.perf_counter()
        self.tokenizer = lltokenizer_from_vocab(llm._model.vocab)
        self.setup_s = time.perf_counter() - t0
        self.executor = llguidance.LLExecutor(num_threads=1)
        super().__init__(prep["n_vocab"])

    def compile(self, schema: dict):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def free(self, matcher) -> None:
        pass

    def mask(self, matcher, row: int = 0) -> None:
        words = self.words[row]
        matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)

    def advance(self, matcher, token: int) -> bool:
        return matcher.consume_token(token)

    def fork(self, matcher):
        return matcher.deep_copy()

    def rollback(self, matcher, n: int) -> None:
        assert matcher.rollback(n)

    def spec_step(self, matcher, draft: list[int]) -> float:
        t0 = time.perf_counter()
        for row in range(len(draft) + 1):
            self.mask(matcher, row)
            if row < len(draft):
                matcher.consume_token(draft[row])
        matcher.rollback(len(draft))
        return time.perf_counter() - t0

    def spec_step_draft_call(self, matcher, draft: list[int]) -> float:
        """The library's own call for it: every mask along the draft, rolled back, in one."""
        t0 = time.perf_counter()
        self.llnp.fill_next_token_bitmask_par_with_draft_tokens(
            self.executor, [(matcher, 0, draft)], self.words
        )
        return time.perf_counter() - t0


class XGrammar(Bitmask):
    name = "xgrammar"

    def __init__(self, prep: dict) -> None:
        import xgrammar

        self.xgr = xgrammar
        self.version = xgrammar.__version__ if hasattr(xgrammar, "__version__") else "?"
        if self.version == "?":
            from importlib.metadata import version

            self.version = version("xgrammar")
        eos, special = prep["eos"], set(prep["special"])
        # Special tokens as empty strings: xgrammar then never allows them (stop tokens apart).
        vocab = [b"" if i in special else bytes.fromhex(p) for i, p in enumerate(prep["pieces"])]
        t0 = time.perf_counter()
        info = xgrammar.TokenizerInfo(
            vocab, xgrammar.VocabType.RAW, vocab_size=prep["n_vocab"], stop_token_ids=[eos]
        )
        self.compiler = xgrammar.GrammarCompiler(
            info, max_threads=os.cpu_count() or 1, cache_enabled=False
        )
        self.setup_s = time.perf_counter() - t0
        self.special_detected = len(info.special_token_ids)
        super().__init__(prep["n_vocab"])

    def compile(self, schema: dict):
        if schema == {"type": "object"}:
            # strict_mode (the default) would close an object with no properties to {}.
            compiled = self.compiler.compile_json_schema(json.dumps(schema), strict_mode=False)
        else:
            compiled = self.compiler.compile_json_schema(json.dumps(schema))
        return self.xgr.GrammarMatcher(compiled)

    def free(self, matcher) -> None:
        pass

    def mask(self, matcher, row: int = 0) -> None:
        matcher.fill_next_token_bitmask(self.words, row)

    def advance(self, matcher, token: int) -> bool:
        return matcher.accept_token(token)

    def fork(self, matcher):
        return matcher.fork()

    def rollback(self, matcher, n: int) -> None:
        matcher.rollback(n)

    def spec_step(self, matcher, draft: list[int]) -> float:
        t0 = time.perf_counter()
        for row in range(len(draft) + 1):
            matcher.fill_next_token_bitmask(self.words, row)
            if row < len(draft):
                matcher.accept_token(draft[row])
        matcher.rollback(len(draft))
        return time.perf_counter() - t0


class Outlines(Bitmask):
    name = "outlines"

    def __init__(self, prep: dict) -> None:
        from importlib.metadata import version

        import outlines_core

        self.oc = outlines_core
        self.version = version("outlines_core")
        eos, special = prep["eos"], set(prep["special"])
        by_bytes: dict[bytes, list[int]] = {}
        for i, p in enumerate(prep["pieces"]):
            if i in special or i == eos or not p:
                continue
            by_bytes.setdefault(bytes.fromhex(p), []).append(i)
        t0 = time.perf_counter()
        self.vocabulary = outlines_core.Vocabulary(eos, by_bytes)
        self.setup_s = time.perf_counter() - t0
        self.index_bytes: dict[str, int] = {}
        super().__init__(prep["n_vocab"])

    def compile(self, schema: dict):
        import copy

        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        index = self.oc.Index(regex, copy.copy(self.vocabulary))
        self.last_regex_chars = len(regex)
        return self.oc.Guide(index)

    def free(self, guide) -> None:
        pass

    def mask(self, guide, row: int = 0) -> None:
        words = self.words[row]
        guide.write_mask_into(words.ctypes.data, words.size, 4)

    def advance(self, guide, token: int) -> bool:
        guide.advance(token, return_tokens=False)
        return True

    def fork(self, guide):
        import copy

        return copy.deepcopy(guide)

    def rollback(self, guide, n: int) -> None:
        guide.rollback_state(n)

    def spec_step(self, guide, draft: list[int]) -> float:
        t0 = time.perf_counter()
        for row in range(len(draft) + 1):
            self.mask(guide, row)
            if row < len(draft):
                guide.advance(draft[row], return_tokens=False)
        guide.rollback_state(len(draft))
        return time.perf_counter() - t0


ADAPTERS = {
    "llamacpp": LlamaCpp,
    "llguidance": LLGuidance,
    "xgrammar": XGrammar,
    "outlines": Outlines,
}


# --------------------------------------------------------------------------------------------
# The walks.


def _walk(
    lib, handle, tokens: list[int], eos: int, special: np.ndarray, timed: bool, keep: bool = False
) -> dict:
    """Mask, check, consume, token by token, then EOS must be allowed. Returns the timings (and
    with `keep` each position's mask, packed, to compare the libraries' masks)."""
    masks, advances, counts, kept = [], [], [], []
    special_allowed, special_ids = 0, set()
    for i in range(len(tokens) + 1):
        lib.before_mask()
        t0 = time.perf_counter()
        lib.mask(handle)
        masks.append(time.perf_counter() - t0)
        allowed = lib.allowed()
        counts.append(int(allowed.sum()))
        if keep:
            kept.append(np.packbits(allowed).tobytes().hex())
        special_allowed += int(np.count_nonzero(allowed & special))
        special_ids.update(np.flatnonzero(allowed & special).tolist())
        want = tokens[i] if i < len(tokens) else eos
        if not allowed[want]:
            return {"refused_at": i, "of": len(tokens), "mask_s": masks, "advance_s": advances,
                    "allowed": counts, "special_allowed": special_allowed,
                    "special_ids": sorted(special_ids)}  # fmt: skip
        if i < len(tokens):
            t0 = time.perf_counter()
            ok = lib.advance(handle, want)
            advances.append(time.perf_counter() - t0)
            if not ok:
                return {"refused_at": i, "of": len(tokens), "mask_s": masks,
                        "advance_s": advances, "allowed": counts,
                        "special_allowed": special_allowed,
                        "special_ids": sorted(special_ids)}  # fmt: skip
    result = {"refused_at": None, "of": len(tokens), "mask_s": masks, "advance_s": advances,
              "allowed": counts, "special_allowed": special_allowed,
              "special_ids": sorted(special_ids), "packed": kept}  # fmt: skip
    return result if timed else {"refused_at": None}


def _spec_walk(lib, handle, tokens: list[int]) -> dict:
    """At each position with k tokens after it: one speculative step along them (timed), a fork
    (timed) and, where the library has one, a rollback of k (timed); then one token forward."""
    steps, draft_calls, forks, rollbacks = [], [], [], []
    for i in range(len(tokens) - K + 1):
        draft = tokens[i : i + K]
        steps.append(lib.spec_step(handle, draft))
        if isinstance(lib, LLGuidance):
            draft_calls.append(lib.spec_step_draft_call(handle, draft))
        if i % 8 == 0:  # every 8th position: outlines-core's copy serializes its Index
            t0 = time.perf_counter()
            other = lib.fork(handle)
            forks.append(time.perf_counter() - t0)
            lib.free(other)
        if lib.rollback is not None:
            for token in draft:
                lib.advance(handle, token)
            t0 = time.perf_counter()
            lib.rollback(handle, K)
            rollbacks.append(time.perf_counter() - t0)
        lib.before_mask()
        lib.mask(handle)  # llama.cpp's grammar expects a mask between accepts; cheap elsewhere
        lib.advance(handle, tokens[i])
    out = {"step_s": steps, "fork_s": forks, "rollback_s": rollbacks}
    if draft_calls:
        out["draft_call_s"] = draft_calls
    return out


def cmd_lib(args) -> None:
    prep = json.loads(Path(args.prep).read_text())
    lib = ADAPTERS[args.lib](prep)
    special = np.zeros(prep["n_vocab"], dtype=bool)
    special[[i for i in prep["special"] if i != prep["eos"]]] = True
    eos = prep["eos"]
    out = {"lib": args.lib, "version": lib.version, "python": sys.executable,
           "setup_s": lib.setup_s, "schemas": {}, "features": []}  # fmt: skip
    if args.lib == "xgrammar":
        out["special_detected"] = lib.special_detected
    names = [n for n, s in prep["schemas"].items() if args.schemas == "all" or not s["heldout"]]
    for name in names:
        spec = prep["schemas"][name]
        entry: dict = {"compile_s": [], "walks": []}
        out["schemas"][name] = entry
        try:
            for rep in range(args.reps):
                t0 = time.perf_counter()
                handle = lib.compile(spec["schema"])
                entry["compile_s"].append(time.perf_counter() - t0)
                walk = _walk(lib, handle, spec["tokens"], eos, special, True, keep=rep == 0)
                entry["walks"].append(walk)
                lib.free(handle)
            if args.lib == "outlines":
                entry["regex_chars"] = lib.last_regex_chars
            if entry["walks"][-1]["refused_at"] is None:
                handle = lib.compile(spec["schema"])
                entry["spec"] = _spec_walk(lib, handle, spec["tokens"])
                lib.free(handle)
        except Exception as error:  # a schema the library cannot compile is a finding
            entry["error"] = f"{type(error).__name__}: {error}"[:400]
        print(f"  {args.lib} {name}: {entry.get('error', 'ok')}", file=sys.stderr, flush=True)
        Path(args.out).write_text(json.dumps(out))  # so far, should the part run out of time
    for feature in prep["features"]:
        row = {"name": feature["name"]}
        try:
            t0 = time.perf_counter()
            handle = lib.compile(feature["schema"])
            row["compile_s"] = time.perf_counter() - t0
            row["compiles"] = True
            valid = _walk(lib, handle, feature["valid"], eos, special, False)
            lib.free(handle)
            row["valid_accepted"] = valid["refused_at"] is None
            handle = lib.compile(feature["schema"])
            invalid = _walk(lib, handle, feature["invalid"], eos, special, False)
            lib.free(handle)
            row["invalid_refused"] = invalid["refused_at"] is not None
        except Exception as error:
            row["compiles"] = False
            row["error"] = f"{type(error).__name__}: {error}"[:300]
        out["features"].append(row)
    out["complete"] = True
    Path(args.out).write_text(json.dumps(out))


# --------------------------------------------------------------------------------------------
# The driver: the machine, the load, each part under its interpreter, the report.


def _busy_seconds() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _run(command: list[str], env: dict, timeout: float, fatal: bool = True) -> dict:
    """Runs one part; returns its wall time and the CPU share others took meanwhile. A part
    that is not `fatal` may fail or run out of time: what it wrote so far is kept."""
    busy0, own0, wall0 = _busy_seconds(), os.times(), time.perf_counter()
    try:
        result = subprocess.run(command, env=env, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        if fatal:
            raise
        return {"wall_s": round(time.perf_counter() - wall0, 1), "foreign_cpu_share": 0.0,
                "timed_out": timeout}  # fmt: skip
    wall = time.perf_counter() - wall0
    own1 = os.times()
    child = (own1.children_user - own0.children_user) + (
        own1.children_system - own0.children_system
    )
    foreign = max(0.0, (_busy_seconds() - busy0) - child)
    sys.stderr.write(result.stderr[-3000:])
    if result.returncode != 0 and fatal:
        raise SystemExit(f"{' '.join(command[:4])} failed ({result.returncode})")
    out = {
        "wall_s": round(wall, 1),
        "foreign_cpu_share": round(foreign / (wall * os.cpu_count()), 3),
    }
    if result.returncode != 0:
        out["exit_status"] = result.returncode
    return out


def _machine() -> dict:
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
         if ln.startswith("model name")), "?",
    )  # fmt: skip
    return {"cpu": cpu, "nproc": os.cpu_count(), "os": platform.platform(),
            "python": platform.python_version()}  # fmt: skip


def _wait_for_load(threshold: float, max_wait: float, poll: float) -> dict:
    first = os.getloadavg()
    started = time.time()
    seen = [first[0]]
    while os.getloadavg()[0] >= threshold and time.time() - started < max_wait:
        print(f"  load average {os.getloadavg()[0]:.2f} >= {threshold}: waiting", flush=True)
        time.sleep(poll)
        seen.append(os.getloadavg()[0])
    now = os.getloadavg()
    return {"at_start": first, "waited_s": round(time.time() - started), "polled": seen,
            "before_timed_part": now, "quiet": now[0] < threshold}  # fmt: skip


def agreement(results: dict, prep: dict, names: list[str]) -> dict:
    """Pairwise: at how many positions of the first walks two libraries' masks are the same
    set of tokens, and at the first that differs, some tokens only one of them allows."""
    libs = list(results)
    out = {}
    for a_i, a in enumerate(libs):
        for b in libs[a_i + 1 :]:
            same = total = 0
            example = None
            for name in names:
                walks_a = results[a]["schemas"].get(name, {}).get("walks", [])
                walks_b = results[b]["schemas"].get(name, {}).get("walks", [])
                if not walks_a or not walks_b:
                    continue
                if walks_a[0]["refused_at"] is not None or walks_b[0]["refused_at"] is not None:
                    continue
                for pos, (x, y) in enumerate(
                    zip(walks_a[0]["packed"], walks_b[0]["packed"], strict=True)
                ):
                    total += 1
                    if x == y:
                        same += 1
                    elif example is None:
                        n = prep["n_vocab"]
                        bx = np.unpackbits(np.frombuffer(bytes.fromhex(x), np.uint8))[:n]
                        by = np.unpackbits(np.frombuffer(bytes.fromhex(y), np.uint8))[:n]
                        only = {
                            lib: [bytes.fromhex(prep["pieces"][t]).decode("utf-8", "replace")
                                  for t in np.flatnonzero(m1 & ~m2)[:6]]
                            for lib, m1, m2 in ((a, bx, by), (b, by, bx))
                        }  # fmt: skip
                        counts = {a: int(bx.sum()), b: int(by.sum())}
                        example = {"schema": name, "position": pos, "counts": counts,
                                   "only": only}  # fmt: skip
            out[f"{a}|{b}"] = {"positions": total, "identical": same, "first_difference": example}
    return out


def _q(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}" if seconds == seconds else "—"


def summarise(results: dict, model: dict, names: list[str]) -> dict:
    step1 = float(np.median(model["seconds"]["1"]))
    step5 = float(np.median(model["seconds"][str(K + 1)]))
    summary: dict = {"step_1_s": step1, f"verify_{K + 1}_s": step5, "libs": {}}
    for lib, res in results.items():
        libsum: dict = {"per_schema": {}}
        for split in ("all", "dev", "heldout"):
            masks, steps = [], []
            for name in names:
                entry = res["schemas"].get(name, {})
                if split != "all" and SCHEMAS[name]["heldout"] != (split == "heldout"):
                    continue
                for walk in entry.get("walks", []):
                    if walk["refused_at"] is None:
                        masks += walk["mask_s"]
                steps += entry.get("spec", {}).get("step_s", [])
            libsum[split] = {
                "positions": len(masks),
                "mask_median_s": _q(masks, 50), "mask_p90_s": _q(masks, 90),
                "mask_p99_s": _q(masks, 99), "mask_max_s": max(masks, default=float("nan")),
                "step_median_s": _q(steps, 50), "step_p99_s": _q(steps, 99),
                "step_max_s": max(steps, default=float("nan")),
            }  # fmt: skip
        for name in names:
            entry = res["schemas"].get(name, {})
            walks = entry.get("walks", [])
            row: dict = {"error": entry.get("error")}
            if walks:
                refused = [w["refused_at"] for w in walks if w["refused_at"] is not None]
                row["refused_at"] = refused[0] if refused else None
                row["tokens"] = walks[0]["of"]
                row["compile_median_s"] = float(np.median(entry["compile_s"]))
                row["compile_first_s"] = entry["compile_s"][0]
                if not refused:
                    masks = [m for w in walks for m in w["mask_s"]]
                    row["mask_median_s"] = _q(masks, 50)
                    row["mask_p99_s"] = _q(masks, 99)
                    row["mask_max_s"] = max(masks)
                    row["doc_total_s"] = float(np.median([sum(w["mask_s"]) for w in walks]))
                    row["advance_median_s"] = _q([a for w in walks for a in w["advance_s"]], 50)
                    row["allowed_median"] = _q([a for w in walks for a in w["allowed"]], 50)
                    row["special_allowed"] = max(w["special_allowed"] for w in walks)
                    row["special_ids"] = sorted({i for w in walks for i in w["special_ids"]})
            spec = entry.get("spec")
            if spec:
                row["step_median_s"] = _q(spec["step_s"], 50)
                row["fork_median_s"] = _q(spec["fork_s"], 50)
                row["rollback_median_s"] = _q(spec["rollback_s"], 50)
                if "draft_call_s" in spec:
                    row["draft_call_median_s"] = _q(spec["draft_call_s"], 50)
            libsum["per_schema"][name] = row
        allspec = [res["schemas"].get(n, {}).get("spec", {}) for n in names]
        libsum["fork_median_s"] = _q([f for s in allspec for f in s.get("fork_s", [])], 50)
        libsum["rollback_median_s"] = _q([f for s in allspec for f in s.get("rollback_s", [])], 50)
        libsum["advance_median_s"] = _q(
            [a for n in names for w in res["schemas"].get(n, {}).get("walks", [])
             if w["refused_at"] is None for a in w["advance_s"]], 50)  # fmt: skip
        draft = [f for s in allspec for f in s.get("draft_call_s", [])]
        if draft:
            libsum["draft_call_median_s"] = _q(draft, 50)
            libsum["draft_call_p99_s"] = _q(draft, 99)
        summary["libs"][lib] = libsum
    return summary


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if part == part else "—"


def report(data: dict) -> str:
    s, names = data["summary"], data["schemas_run"]
    step1, step5 = s["step_1_s"], s[f"verify_{K + 1}_s"]
    load = data["load"]
    before, after = data["model_before"]["seconds"], data["model_after"]["seconds"]
    verify9 = float(np.median(before[str(2 * K + 1)] + after[str(2 * K + 1)]))
    apply_s = float(np.median([data["model_before"]["bitmask_apply_s"],
                               data["model_after"]["bitmask_apply_s"]]))  # fmt: skip
    lines = [
        f"# Grammar masks for structured outputs, {data['date']}",
        "",
        "What a JSON-Schema grammar costs a speculative step (issue 44, ADR 0031): a full-"
        "vocabulary allowed-token mask (49,152 tokens, SmolLM2-135M) per position, four "
        "libraries side by side in one run, against one decode step of the served model.",
        "",
        f"Command: `{data['command']}`",
        "",
        f"Machine: {data['machine']['cpu']}, {data['machine']['nproc']} CPUs (`nproc`), "
        f"{data['machine']['os']}. Revision {data['revision']}.",
        f"Load average (1/5/15 min): at start {'/'.join(f'{x:.2f}' for x in load['at_start'])}"
        f", waited {load['waited_s']} s, before the timed part "
        f"{'/'.join(f'{x:.2f}' for x in load['before_timed_part'])}"
        f"{'' if load['quiet'] else ' (the wait ran out with it above 1.0)'}, "
        f"at end {'/'.join(f'{x:.2f}' for x in data['load_end'])}.",
        "The direct measure, the CPU share other processes took during each part: "
        + ", ".join(f"{k} {100 * v['foreign_cpu_share']:.0f}%" for k, v in data["parts"].items())
        + ". "
        + " ".join(
            f"{k} stopped after {v['timed_out']:.0f} s (what it finished is kept)."
            for k, v in data["parts"].items()
            if "timed_out" in v
        )
        + " ".join(
            f"{k} exited with status {v['exit_status']}."
            for k, v in data["parts"].items()
            if "exit_status" in v
        ),
        "",
        f"Baseline, the served file ({Path(data['model_before']['gguf']).name}, 2 threads, "
        f"llama-cpp-python {data['model_before']['llama_cpp']}): one token's `eval` after a "
        f"{data['model_before']['prompt_tokens']}-token prompt {_us(step1)} µs (median of "
        f"{data['model_before']['rounds']} rounds before the libraries and as many after; before "
        f"{_us(np.median(before['1']))}, after {_us(np.median(after['1']))}), a verify pass of "
        f"{K + 1} positions {_us(step5)} µs, of {2 * K + 1} {_us(verify9)} µs. Applying a "
        f"bitmask to the 49,152 logits with numpy (what a bitmask library adds per position, "
        f"not timed below): {_us(apply_s)} µs.",
        "",
        "## Per-position mask, all schemas",
        "",
        f"Every position of every document ({', '.join(names)}), each compiled afresh "
        f"{data['reps']} times with one walk per compile. µs; `% step` is the mask over one "
        f"decode step; the speculative step is k + 1 = {K + 1} masks along a k = {K} draft with "
        f"the state advanced and rolled back (llama.cpp: a clone advanced and dropped), at every "
        f"position with {K} tokens after it; `% verify` is its median over a {K + 1}-position "
        "verify pass.",
        "",
        "| library | version | positions | median | p90 | p99 | max | median % step | p99 % step "
        f"| spec. step median | p99 | max | median % verify {K + 1} |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lib in data["libs"]:
        a = s["libs"][lib]["all"]
        lines.append(
            f"| {LIB_NAMES[lib]} | {data['results'][lib]['version']} | {a['positions']} | "
            f"{_us(a['mask_median_s'])} | {_us(a['mask_p90_s'])} | {_us(a['mask_p99_s'])} | "
            f"{_us(a['mask_max_s'])} | {_pct(a['mask_median_s'], step1)} | "
            f"{_pct(a['mask_p99_s'], step1)} | {_us(a['step_median_s'])} | "
            f"{_us(a['step_p99_s'])} | {_us(a['step_max_s'])} | "
            f"{_pct(a['step_median_s'], step5)} |"
        )
    lines += [
        "",
        "The same over the dev schemas and over the held-out ones (mask median / p99 / max, µs):",
        "",
        "| library | dev | held-out |",
        "|---|---|---|",
    ]
    for lib in data["libs"]:
        d, h = s["libs"][lib]["dev"], s["libs"][lib]["heldout"]
        lines.append(
            f"| {LIB_NAMES[lib]} | {_us(d['mask_median_s'])} / {_us(d['mask_p99_s'])} / "
            f"{_us(d['mask_max_s'])} | {_us(h['mask_median_s'])} / {_us(h['mask_p99_s'])} / "
            f"{_us(h['mask_max_s'])} |"
        )
    lines += [
        "",
        "## State: advance, fork, rollback (medians over all positions, µs)",
        "",
        f"| library | setup (tokenizer), s | advance 1 token | fork | rollback {K} | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for lib in data["libs"]:
        ls, nan = s["libs"][lib], float("nan")
        note = {
            "llamacpp": "no rollback: a step clones the sampler and drops the clone",
            "llguidance": "its own draft call (`fill_next_token_bitmask_par_with_draft_tokens`"
            f", {K + 1} masks + rollback): median {_us(ls.get('draft_call_median_s', nan))}"
            f", p99 {_us(ls.get('draft_call_p99_s', nan))}",
            "xgrammar": "`fork()`; rollback unlimited",
            "outlines": "no fork: `copy.deepcopy` of a Guide serializes its whole Index "
            "(timed here); rollback up to `max_rollback` (32)",
        }[lib]
        lines.append(
            f"| {LIB_NAMES[lib]} | {data['results'][lib]['setup_s']:.2f} | "
            f"{_us(ls['advance_median_s'])} | {_us(ls['fork_median_s'])} | "
            f"{_us(ls['rollback_median_s'])} | {note} |"
        )
    lines += ["", "## Per schema", ""]
    lines += [
        "Compile: median of the fresh compiles (first in brackets), ms. Mask: median / p99 / "
        "max, µs. Document: the masks of one whole document, ms (median over walks). Allowed: "
        "median tokens the mask allows. `held-out` schemas were written with the others before "
        "any figure was seen, left out of every run while the bench was written (`--schemas "
        "dev`) and not changed since.",
        "",
        "| schema | tokens | library | compile ms | mask µs | document ms | allowed | note |",
        "|---|---:|---|---:|---|---:|---:|---|",
    ]
    for name in names:
        for lib in data["libs"]:
            r = s["libs"][lib]["per_schema"][name]
            label = f"{name}{' (held-out)' if SCHEMAS[name]['heldout'] else ''}"
            if "tokens" not in r and not r.get("error"):
                lines.append(f"| {label} | | {LIB_NAMES[lib]} | | | | | not reached |")
                continue
            if r.get("error"):
                lines.append(
                    f"| {label} | | {LIB_NAMES[lib]} | | | | | fails: {r['error'][:160]} |"
                )
                continue
            note = ""
            if r.get("refused_at") is not None:
                note = f"refused the valid document at token {r['refused_at']} of {r['tokens']}"
            elif r.get("special_allowed"):
                note = (
                    f"allowed special tokens (ids {r['special_ids'][0]}-{r['special_ids'][-1]}) "
                    f"{r['special_allowed']} times"
                )
            mask = (
                f"{_us(r['mask_median_s'])} / {_us(r['mask_p99_s'])} / {_us(r['mask_max_s'])}"
                if "mask_median_s" in r
                else "—"
            )
            doc = f"{r['doc_total_s'] * 1e3:.1f}" if "doc_total_s" in r else "—"
            allowed = f"{r['allowed_median']:.0f}" if "allowed_median" in r else "—"
            lines.append(
                f"| {label} | {r['tokens']} | {LIB_NAMES[lib]} | "
                f"{r['compile_median_s'] * 1e3:.1f} ({r['compile_first_s'] * 1e3:.1f}) | "
                f"{mask} | {doc} | {allowed} | {note} |"
            )
    lines += [
        "",
        "## Do the masks agree?",
        "",
        "Positions of the first walks where two libraries allow exactly the same set of tokens "
        "(whitespace rules differ: llguidance and xgrammar allow any JSON whitespace by "
        "default, outlines-core and llama.cpp's converter one optional space), and at the first "
        "that differs, up to six tokens only one of them allows.",
        "",
        "| pair | identical positions | first difference |",
        "|---|---:|---|",
    ]
    for pair, row in data["agreement"].items():
        a, b = pair.split("|")
        ex = row["first_difference"]
        text = "—"
        if ex:
            text = (
                f"{ex['schema']} position {ex['position']} ({LIB_NAMES[a]} {ex['counts'][a]}, "
                f"{LIB_NAMES[b]} {ex['counts'][b]} tokens); only {LIB_NAMES[a]}: "
                f"{', '.join(repr(t) for t in ex['only'][a]) or '—'}; only {LIB_NAMES[b]}: "
                f"{', '.join(repr(t) for t in ex['only'][b]) or '—'}"
            ).replace("|", "\\|")
        lines.append(
            f"| {LIB_NAMES[a]} / {LIB_NAMES[b]} | {row['identical']} of {row['positions']} | "
            f"{text} |"
        )
    lines += [
        "",
        "## Coverage",
        "",
        "Each feature alone: ✓ compiled, its valid instance accepted and its invalid one refused; "
        "`loose` compiled and accepted the valid instance but also the invalid one (the keyword "
        "is not enforced); `refuses valid`; `fails` did not compile.",
        "",
        "| feature | " + " | ".join(LIB_NAMES[lib] for lib in data["libs"]) + " |",
        "|---|" + "---|" * len(data["libs"]),
    ]
    for i, (name, *_rest) in enumerate(FEATURES):
        cells = []
        for lib in data["libs"]:
            done = data["results"][lib]["features"]
            row = done[i] if i < len(done) else None
            if row is None:
                cells.append("not reached")
            elif not row["compiles"]:
                cells.append("fails")
            elif not row["valid_accepted"]:
                cells.append("refuses valid")
            elif not row["invalid_refused"]:
                cells.append("loose")
            else:
                cells.append("✓")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    errors = [
        (LIB_NAMES[lib], row["name"], row["error"])
        for lib in data["libs"]
        for row in data["results"][lib]["features"]
        if row.get("error")
    ]
    if errors:
        lines += ["", "Compile errors:", ""]
        lines += [f"- {lib}, {name}: `{err[:200]}`" for lib, name, err in errors]
    if data.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {note}" for note in data["notes"]]
    lines += [
        "",
        "## How",
        "",
        "Documents are written by `json.dumps` (`, ` and `: `, one line) and tokenized by "
        "llama.cpp's tokenizer of the shipped GGUF, as the engine tokenizes. Each library runs "
        "with its defaults for JSON Schema (llguidance and xgrammar allow any whitespace; "
        "outlines-core and llama.cpp's converter one optional space), except xgrammar for "
        '`{"type": "object"}`, compiled with `strict_mode=False` (strict mode closes it to `{}`). '
        "Special tokens (control tokens and `<...>` user-defined ones) are given to xgrammar as "
        "empty strings and left out of outlines-core's vocabulary, as llguidance marks them; "
        "llama.cpp's grammar sampler sees them as the text it decodes them to. A mask is timed "
        "alone: llama.cpp's candidate array (49,152 entries) is refilled before each apply, "
        "untimed; applying a bitmask to the logits is not timed for any library. xgrammar compiles "
        f"with {data['machine']['nproc']} threads and its cache off; llguidance's executor has one "
        "thread. Before the timed part the driver waits for the 1-minute load average to fall "
        "below 1.0 (polled every 60 s, at most 25 minutes); each part is a process of its own, "
        "run one after another, and the CPU time the machine spent outside it is reported.",
        "",
        "Rerun: build the two environments as the script's docstring says, then the command "
        "above from the repository root (`.venv/bin/python bench/grammar_mask.py --gvenv "
        "/tmp/gvenv/bin/python --llguidance-path /tmp/llg_only`); `--schemas dev` leaves the "
        "held-out schemas out; `python bench/grammar_mask.py render FILE.json` writes the "
        "markdown again from a result's JSON.",
        "",
    ]
    return "\n".join(lines)


def cmd_run(args) -> None:
    _project_imports()
    names = [n for n, s in SCHEMAS.items() if args.schemas == "all" or not s["heldout"]]
    libs = [lib for lib in args.libs.split(",") if lib]
    load = (
        _wait_for_load(1.0, args.max_wait, 60)
        if not args.no_wait
        else {"at_start": os.getloadavg(), "waited_s": 0, "polled": [],
              "before_timed_part": os.getloadavg(), "quiet": os.getloadavg()[0] < 1.0}
    )  # fmt: skip
    here = sys.executable
    env = dict(os.environ)
    parts, results = {}, {}
    with tempfile.TemporaryDirectory(prefix="grammar-mask-") as work:
        work = Path(work)
        script = str(Path(__file__).resolve())
        prep = work / "prep.json"
        _run([here, script, "prepare", "--out", str(prep)], env, 600)
        model = {}

        def model_step(when: str) -> None:
            print(f"model step ({when})", flush=True)
            out = work / f"model-{when}.json"
            parts[f"model {when}"] = _run(
                [here, script, "model", "--out", str(out), "--rounds", str(args.rounds),
                 "--model-cache", args.model_cache],
                env, 600,
            )  # fmt: skip
            model[when] = json.loads(out.read_text())

        model_step("before")
        for lib in libs:
            python = args.gvenv if lib in ("xgrammar", "outlines") else here
            lib_env = dict(env)
            if lib == "llguidance" and args.llguidance_path:
                lib_env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (args.llguidance_path, env.get("PYTHONPATH")) if p
                )
            print(f"{lib} ({python})", flush=True)
            out = work / f"{lib}.json"
            parts[lib] = _run(
                [python, script, "lib", "--lib", lib, "--prep", str(prep), "--out", str(out),
                 "--reps", str(args.reps), "--schemas", args.schemas],
                lib_env, args.part_timeout, fatal=False,
            )  # fmt: skip
            results[lib] = (
                json.loads(out.read_text())
                if out.exists()
                else {"version": "?", "setup_s": float("nan"), "schemas": {}, "features": []}
            )
        model_step("after")
        agree = agreement(results, json.loads(prep.read_text()), names)
        for res in results.values():
            for entry in res["schemas"].values():
                for walk in entry.get("walks", []):
                    walk.pop("packed", None)
    both = {
        n: model["before"]["seconds"][n] + model["after"]["seconds"][n]
        for n in model["before"]["seconds"]
    }
    from bench.machine import git_revision

    data = {
        "date": dt.date.today().isoformat(),
        "command": " ".join(["python", "bench/grammar_mask.py", *sys.argv[1:]]),
        "revision": git_revision(),
        "machine": _machine(),
        "load": load,
        "load_end": os.getloadavg(),
        "parts": parts,
        "k": K,
        "reps": args.reps,
        "libs": libs,
        "schemas_run": names,
        "heldout": [n for n in names if SCHEMAS[n]["heldout"]],
        "model_before": model["before"],
        "model_after": model["after"],
        "results": results,
        "agreement": agree,
        "schemas": {
            n: {
                "schema": SCHEMAS[n]["schema"],
                "document": SCHEMAS[n]["document"],
                "heldout": SCHEMAS[n]["heldout"],
            }
            for n in names
        },  # fmt: skip
    }
    data["summary"] = summarise(results, {"seconds": both}, names)
    text = report(data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"grammar-mask-{data['date']}{'-' + args.tag if args.tag else ''}"
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / f"{stem}.md").write_text(text)
    print(text)


def cmd_render(args) -> None:
    path = Path(args.json)
    path.with_suffix(".md").write_text(report(json.loads(path.read_text())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    run = sub.add_parser("run", help="the whole comparison (the default)")
    for p in (parser, run):
        p.add_argument("--gvenv", default="/tmp/gvenv/bin/python",
                       help="interpreter with xgrammar and outlines-core")  # fmt: skip
        p.add_argument("--llguidance-path", default="/tmp/llg_only",
                       help="directory holding the llguidance package (pip --target)")  # fmt: skip
        p.add_argument("--libs", default=",".join(LIBS))
        p.add_argument("--schemas", choices=("all", "dev"), default="all")
        p.add_argument("--reps", type=int, default=3)
        p.add_argument("--rounds", type=int, default=30)
        p.add_argument("--model-cache", default=str(ROOT / "var" / "model-cache"))
        p.add_argument("--max-wait", type=float, default=25 * 60)
        p.add_argument("--no-wait", action="store_true")
        p.add_argument("--part-timeout", type=float, default=1200)
        p.add_argument("--out", default=str(ROOT / "bench" / "results"))
        p.add_argument("--tag", default="")
    render = sub.add_parser("render", help="write a result's markdown again from its JSON")
    render.add_argument("json")
    prepare = sub.add_parser("prepare")
    prepare.add_argument("--out", required=True)
    model = sub.add_parser("model")
    model.add_argument("--out", required=True)
    model.add_argument("--rounds", type=int, default=30)
    model.add_argument("--model-cache", required=True)
    lib = sub.add_parser("lib")
    lib.add_argument("--lib", choices=LIBS, required=True)
    lib.add_argument("--prep", required=True)
    lib.add_argument("--out", required=True)
    lib.add_argument("--reps", type=int, default=3)
    lib.add_argument("--schemas", choices=("all", "dev"), default="all")
    args = parser.parse_args()
    commands = {"prepare": cmd_prepare, "model": cmd_model, "lib": cmd_lib, "render": cmd_render}
    commands.get(args.cmd, cmd_run)(args)


if __name__ == "__main__":
    main()
