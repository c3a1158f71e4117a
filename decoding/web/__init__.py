"""The web side's serving code: the native API, the OpenAI-compatible API, and waiting for and
relaying a job's committed records. Never imports decoding.worker."""
