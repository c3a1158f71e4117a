"""Running jobs on a worker: claiming an attempt, its lease, the models a worker keeps loaded
(and its sequence engine's slots), the audit sinks the decoder records through, and replays.
Never imports decoding.web."""
