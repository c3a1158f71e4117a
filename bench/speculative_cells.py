"""What the speculative benchmark measures: the systems it compares (by the names its tables and
JSON use), the temperatures and the workloads, and the default spec's drafter settings."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"

# The default spec's prompt-lookup settings (decoding/migrations/0004_prompt_lookup_trigrams.py);
# the run reads the migrated spec and uses these only if it is missing.
SPEC_NAME = "smollm2-135m-instruct"
SHIPPED_NGRAMS = {"min_ngram": 3, "max_ngram": 3}

PLAIN = "llama.cpp plain"
LOOP = "llama.cpp loop"
PF_AUDIT = "pathfinder+audit"
PF_NOAUDIT = "pathfinder, no audit"
HF = "hf generate"
HF_PLD = "hf prompt lookup"
SYSTEMS = [PLAIN, LOOP, PF_AUDIT, PF_NOAUDIT, HF, HF_PLD]
LLAMA_SYSTEMS = [PLAIN, LOOP, PF_AUDIT, PF_NOAUDIT]
PF_SYSTEMS = (PF_AUDIT, PF_NOAUDIT)
HF_SYSTEMS = [HF, HF_PLD]

TEMPERATURES = {"greedy": 0.0, "t=0.7": 0.7}


def workloads() -> dict[str, str]:
    contract = (DATA / "contract.txt").read_text().strip()
    return {
        "open-ended": (
            "Write a short story about a lighthouse keeper who finds a message in a bottle. "
            "Describe the keeper, the storm that night, and what the message says."
        ),
        "extraction": (
            f"{contract}\n\nQuote Section 3 of this agreement verbatim, word for word, then "
            "list the parties and every dollar amount, quoting the sentence each appears in."
        ),
        "summary": (
            f"Summarize the following services agreement in about 150 words: the parties, the "
            f"services, the fees, the term and how it can be terminated.\n\n{contract}"
        ),
    }
