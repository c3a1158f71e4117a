"""The kinds of model providers and drafters a ModelSpec can name, one class each."""
