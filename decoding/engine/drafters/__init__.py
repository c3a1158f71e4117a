"""Ways of proposing tokens for the target to verify; one class per way, one interface."""

from .base import Draft, Drafter, DraftSource, Reference
from .draft_model import DraftModelDrafter
from .prompt_lookup import PromptLookupDrafter

__all__ = [
    "Draft",
    "DraftModelDrafter",
    "DraftSource",
    "Drafter",
    "PromptLookupDrafter",
    "Reference",
]
