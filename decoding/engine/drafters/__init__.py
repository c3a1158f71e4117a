"""Ways of proposing tokens for the target to verify; one class per way, one interface."""

from .base import Draft, Drafter
from .draft_model import DraftModelDrafter
from .prompt_lookup import PromptLookupDrafter

__all__ = ["Draft", "Drafter", "DraftModelDrafter", "PromptLookupDrafter"]
