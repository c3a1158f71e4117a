"""Speculative decoding: the engine, generation jobs, their API and workers."""
