"""audit.evidence.chain without a database: canonical form, hashing and the verifier's reports."""

import json
import math

import pytest

from audit.evidence import chain

TRAIL = "3f2a6c1e-0000-4000-8000-000000000001"


def build_trail(count: int, trail_id: str = TRAIL) -> list[chain.StoredRecord]:
    records, prev = [], chain.genesis_hash(trail_id)
    for seq in range(count):
        payload = chain.canonical_json({"step": seq, "emitted": [seq]})
        digest = chain.record_hash(trail_id, seq, prev, payload)
        records.append(chain.StoredRecord(trail_id, seq, prev, digest, payload))
        prev = digest
    return records


def vars_of(record: chain.StoredRecord) -> tuple:
    return (record.trail_id, record.seq, record.prev_hash, record.record_hash, record.payload)


def first_failure(records, trail_id=TRAIL):
    failures = chain.verify_trail(trail_id, records).failures
    assert failures, "tampering went unnoticed"
    return failures[0]


def test_canonical_json_sorts_keys_and_drops_whitespace():
    assert chain.canonical_json({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'


@pytest.mark.parametrize("value", [0.5, math.nan, math.inf, 2**53, {1: "x"}, {"a": {1, 2}}])
def test_canonical_json_refuses_values_without_one_spelling(value):
    with pytest.raises(chain.NonCanonicalValue):
        chain.canonical_json(value)


def test_an_intact_trail_reports_nothing_and_its_head():
    records = build_trail(5)
    summary = chain.verify_trail(TRAIL, records)
    assert summary.failures == []
    assert (summary.record_count, summary.head_hash) == (5, records[-1].record_hash)


def test_a_record_cannot_move_to_another_trail_because_the_trail_id_is_hashed():
    other = "3f2a6c1e-0000-4000-8000-000000000002"
    assert chain.genesis_hash(TRAIL) != chain.genesis_hash(other)
    moved = [chain.StoredRecord(other, *vars_of(r)[1:]) for r in build_trail(1)]
    assert first_failure(moved, other).seq == 0


def test_an_edited_payload_is_named_by_its_seq_and_reported_once():
    records = build_trail(6)
    edited = records[3]
    records[3] = chain.StoredRecord(*vars_of(edited)[:4], edited.payload.replace("3", "4"))
    failures = chain.verify_trail(TRAIL, records).failures
    assert [(f.seq, f.reason) for f in failures] == [(3, "record_hash does not match contents")]


def test_a_missing_record_is_named_and_later_links_still_checked():
    records = build_trail(6)
    del records[2]
    failures = chain.verify_trail(TRAIL, records).failures
    assert failures[0].seq == 2
    assert "missing" in failures[0].reason


def test_a_non_canonical_payload_with_a_matching_hash_is_reported():
    trail_id, prev = TRAIL, chain.genesis_hash(TRAIL)
    payload = json.dumps({"step": 0}, indent=1)
    record = chain.StoredRecord(
        trail_id, 0, prev, chain.record_hash(trail_id, 0, prev, payload), payload
    )
    assert first_failure([record]).reason == "payload is not in canonical form"


def test_the_ledger_walk_reports_a_broken_entry_by_seq():
    entries, prev = [], chain.ledger_genesis_hash()
    for seq in range(3):
        payload = chain.ledger_payload(
            format_version=1,
            trail_id=f"t{seq}",
            job_id="j",
            record_count=1,
            head_hash="h",
            outcome="succeeded",
        )
        digest = chain.ledger_entry_hash(seq, prev, payload)
        entries.append(chain.StoredLedgerEntry(seq, prev, digest, payload))
        prev = digest
    entries[1] = chain.StoredLedgerEntry(1, entries[1].prev_hash, entries[1].entry_hash, "{}")
    failures = [f for _, fs in chain.verify_ledger(entries) for f in fs]
    assert [(f.scope, f.seq) for f in failures] == [("ledger", 1)]
