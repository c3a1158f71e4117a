"""The request and response shapes both processes use: what a request must look like (the native
and the OpenAI-compatible inputs, a Batch API line), and the OpenAI shapes of an answer, an
error and a Batch API output line. The web side answers HTTP with them; the worker's batch
tasks check lines and write output files with them. Imports the shared root, never web/ or
worker/ (tests/unit/test_shelves.py)."""
