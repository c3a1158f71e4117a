"""OpenAI-compatible endpoints (/v1/*): the same jobs as the native API, in OpenAI's shapes."""
