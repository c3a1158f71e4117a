"""Matters, API keys and generation jobs."""

import hashlib
import uuid

from django.core.validators import MaxValueValidator
from django.db import models

from decoding.engine.params import MAX_TOP_LOGPROBS
from decoding.kinds.registry import DRAFTER_KINDS, PROVIDER_KINDS


class Matter(models.Model):
    """A legal case. Jobs, keys and reviewer grants are scoped to one. A legal hold and a
    retention period govern when its content may be destroyed (reviewers.destruction); the
    custody log records each change of the hold."""

    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set while a legal hold is on (reviewers.records): nothing of the matter is destroyed then.
    hold_reason = models.TextField(blank=True, default="")
    hold_since = models.DateTimeField(null=True, blank=True)
    hold_by = models.CharField(max_length=200, blank=True, default="")
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Destroy job content this many days after submission (empty: keep it)",
    )
    # How many destructions took content of the matter: a worker that saw fewer forgets the
    # matter's cached state before its next job (decoding.worker.forgetting).
    destructions = models.PositiveIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def on_hold(self) -> bool:
        return self.hold_since is not None


def _all_scopes() -> list[str]:
    return list(ApiKey.Scope.values)


class ApiKey(models.Model):
    """An application's credential. Only the SHA-256 of the key is stored: keys are 256-bit random
    strings, so an unsalted digest is as strong as the key and allows an indexed lookup."""

    class Scope(models.TextChoices):
        GENERATE = "generate", "submit and cancel generations"
        READ = "read", "read generations, their trails and the models"

    matter = models.ForeignKey(Matter, on_delete=models.PROTECT, related_name="api_keys")
    name = models.CharField(max_length=200)
    owner = models.CharField(
        max_length=200,
        blank=True,
        help_text="Who holds the key (a person, a firm): the request records of its jobs name them",
    )
    prefix = models.CharField(
        max_length=16, help_text="First characters of the key, to recognise it"
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=_all_scopes, help_text='Any of "generate", "read"')
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["matter", "name"]
        constraints = [
            models.UniqueConstraint(fields=["matter", "name"], name="decoding_apikey_matter_name")
        ]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) for {self.matter}"

    @staticmethod
    def digest(raw_key: str) -> str:
        return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()

    def is_expired(self, now) -> bool:
        return self.expires_at is not None and self.expires_at <= now


def _kind_choices(kinds: dict) -> list[tuple[str, str]]:
    return [(name, kind.label) for name, kind in kinds.items()]


class ModelSpec(models.Model):
    """A (draft, target) configuration that jobs name. Managed in the admin; validated when saved,
    so a pair that cannot work (different vocabularies) is refused then, never mid-request."""

    class Schedule(models.TextChoices):
        ADAPTIVE = "adaptive", "adaptive (measured verify cost)"
        FIXED = "fixed", "fixed (the request's draft_length)"

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    # The kinds a spec can name, one class each (decoding.kinds.registry).
    provider = models.CharField(max_length=20, choices=_kind_choices(PROVIDER_KINDS))
    path = models.CharField(
        max_length=500,
        blank=True,
        help_text="GGUF file or model directory; blank: the bundled model",
    )
    revision = models.CharField(max_length=200, blank=True)
    provider_settings = models.JSONField(default=dict, blank=True)
    drafter = models.CharField(max_length=20, choices=_kind_choices(DRAFTER_KINDS))
    drafter_settings = models.JSONField(
        default=dict,
        blank=True,
        help_text='prompt_lookup: {"min_ngram": 1, "max_ngram": 3}; draft_model: '
        '{"provider": "llamacpp", "path": "", "revision": ""}',
    )
    draft_schedule = models.CharField(
        max_length=20, choices=Schedule.choices, default=Schedule.ADAPTIVE
    )
    default_params = models.JSONField(
        default=dict,
        blank=True,
        help_text='defaults for request fields the caller leaves out, e.g. {"temperature": 0.2, '
        '"top_p": 0.9, "max_tokens": 128}',
    )
    # A GGUF file carries no generation config, so where the sampling defaults come from (the
    # model card, a generation_config.json) is recorded beside them, for operators and callers.
    default_params_source = models.CharField(
        max_length=500,
        blank=True,
        help_text="where default_params come from (the model card or generation config)",
    )
    top_logprobs = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_TOP_LOGPROBS)],
        help_text="the most top log-probabilities per token a request may ask for; a job that "
        "asks for N has its records keep the target's N most probable tokens at each position "
        "(0: only the chosen tokens' log-probabilities, which every record holds)",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "model spec"

    def __str__(self) -> str:
        return self.name

    def clean(self):
        from decoding.model_specs import model_spec_check

        model_spec_check(self)


class GenerationJob(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    class Failure(models.TextChoices):
        """Why a job failed, for callers to act on; the cause's own text goes to the log
        (with the job id), never to a client."""

        AUDIT_UNAVAILABLE = "audit_unavailable", "audit store unavailable, no output released"
        GENERATION_FAILED = "generation_failed", "generation failed"
        MODEL_UNAVAILABLE = "model_unavailable", "the worker could not load the model"
        WORKER_LOST = "worker_lost", "the worker was lost in every attempt"
        QUEUE_UNAVAILABLE = "queue_unavailable", "the job queue is unavailable"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    matter = models.ForeignKey(Matter, on_delete=models.PROTECT, related_name="jobs")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    request_id = models.CharField(max_length=128, null=True, blank=True)
    # Who the caller says directed the job, and its confidentiality designation ("attorney work
    # product"): the caller's own words, stated in the trail's request record.
    directed_by = models.CharField(max_length=200, blank=True, default="")
    designation = models.CharField(max_length=200, blank=True, default="")
    model_spec = models.ForeignKey(ModelSpec, on_delete=models.PROTECT, related_name="jobs")
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    error = models.TextField(blank=True)  # for the caller: the failure's label, no internals
    failure = models.CharField(max_length=32, choices=Failure.choices, blank=True)

    # What the caller sent (text, chat messages or ids) and the ids it tokenised to.
    prompt_text = models.TextField(blank=True)
    messages = models.JSONField(null=True, blank=True)
    prompt_token_ids = models.JSONField()
    stop = models.JSONField(default=list, blank=True)
    max_tokens = models.PositiveIntegerField()
    temperature = models.FloatField()
    top_k = models.PositiveIntegerField()
    top_p = models.FloatField()
    seed = models.BigIntegerField()
    draft_length = models.PositiveIntegerField()
    eos_token_id = models.PositiveIntegerField(null=True, blank=True)
    # The target's most probable tokens each record keeps per emitted token (top_logprobs).
    top_logprobs = models.PositiveSmallIntegerField(default=0)
    # Structured outputs: OpenAI's response_format (json_object or json_schema) the output is
    # constrained to, as JSON text (ResponseFormat.stored: the schema keeps its key order);
    # "": unconstrained.
    response_format = models.TextField(blank=True, default="")
    # A streamed job commits every step's record on its own, so each can be relayed at once.
    stream = models.BooleanField(default=False)
    # Its caller holds a connection open until it ends (a /v1 request or a stream): counted
    # against PATHFINDER_KEY_MAX_WAITING, and cancelled when that caller goes away.
    caller_waits = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Delivery: when the job was last handed to the queue (the recovery sweep re-queues a job
    # whose message was lost), and the running attempt's lease, renewed while it decodes; an
    # expired lease means its worker died, and the next delivery starts a new attempt.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # Which worker holds the job's message (received, not yet acknowledged) and until when, the
    # mark renewed while it holds it: a queued job nobody holds and the broker no longer has is
    # sent again (decoding.delivery).
    received_at = models.DateTimeField(null=True, blank=True)
    held_by = models.CharField(max_length=200, blank=True)
    held_until = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid of the attempt")

    # Written once, with the trail's seal, in the same transaction: only committed tokens.
    output_token_ids = models.JSONField(default=list, blank=True)
    output_text = models.TextField(blank=True)
    stop_reason = models.CharField(max_length=16, blank=True)
    steps = models.PositiveIntegerField(default=0)
    drafted = models.PositiveIntegerField(default=0)
    accepted = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    trail_id = models.UUIDField(null=True, blank=True)
    # Per-request speculation: per step drafted/accepted, per-position acceptance, histogram.
    metrics = models.JSONField(default=dict, blank=True)

    # Milliseconds. Speculation speeds up decoding only, so prefill is reported apart.
    load_ms = models.FloatField(null=True, blank=True)
    prefill_ms = models.FloatField(null=True, blank=True)
    # Leading prompt tokens the worker's target already held (live or saved KV state), not
    # evaluated again: prefill_ms covers only the rest.
    cached_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    decode_ms = models.FloatField(null=True, blank=True)
    audit_ms = models.FloatField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Set when the job's texts were destroyed under an order (reviewers.destruction); its
    # trail's records and leaf stay (audit.models.Erasure).
    destroyed_at = models.DateTimeField(null=True, blank=True)
    destroyed_under = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "request_id"],
                condition=models.Q(request_id__isnull=False),
                name="decoding_job_key_request_id",
            )
        ]

    def __str__(self) -> str:
        return f"job {self.id} ({self.status})"

    @property
    def question(self) -> str:
        """What was asked, for a reader: a chat's last user message, else the prompt text
        ("" when the caller sent token ids)."""
        users = [m["content"] for m in self.messages or () if m.get("role") == "user"]
        return users[-1] if users else self.prompt_text

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def queue_ms(self) -> float | None:
        if self.started_at is None:
            return None
        return round((self.started_at - self.created_at).total_seconds() * 1000, 1)

    @property
    def latency_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return round((self.finished_at - self.created_at).total_seconds() * 1000)


class Replay(models.Model):
    """A re-run of a recorded job (same models, params, seed, method and draft lengths) whose
    decisions are compared with the trail's, field by field."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey(GenerationJob, on_delete=models.PROTECT, related_name="replays")
    trail_id = models.UUIDField()
    requested_by = models.ForeignKey(
        "auth.User", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    identical = models.BooleanField(null=True)
    steps_compared = models.PositiveIntegerField(default=0)
    # {"step", "field", "recorded", "replayed"} of the first difference, or null.
    first_divergence = models.JSONField(null=True, blank=True)
    # One {"step", "identical", "fields"} per recorded step.
    steps = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    # A running replay's lease, renewed while it decodes; the recovery sweep fails a replay
    # whose lease lapsed (its worker died), so none stays "running" for ever.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"replay of job {self.job_id} ({self.status})"


def _file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


def _batch_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


class BatchFile(models.Model):
    """A file of OpenAI's Files API: an uploaded batch input (JSONL), or a batch's output or
    error file, written once when its batch ends. Kept in the database, as the trails are (an
    input is evidence of what was asked), in parts (BatchFilePart, decoding.batch_files)."""

    class Purpose(models.TextChoices):
        BATCH = "batch"
        BATCH_OUTPUT = "batch_output"

    id = models.CharField(primary_key=True, max_length=40, default=_file_id, editable=False)
    matter = models.ForeignKey(Matter, on_delete=models.PROTECT, related_name="batch_files")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    filename = models.CharField(max_length=255)
    bytes = models.PositiveBigIntegerField()
    line_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # Set when its parts were destroyed with the jobs of its lines (reviewers.destruction).
    destroyed_at = models.DateTimeField(null=True, blank=True)
    destroyed_under = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "batch file"

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"


class BatchFilePart(models.Model):
    """A piece of a file's bytes, in order from index 0: a file is read and written a part at a
    time, so no step holds it whole and no file meets PostgreSQL's 1 GiB limit on one value."""

    file = models.ForeignKey(BatchFile, on_delete=models.CASCADE, related_name="parts")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["file", "index"], name="decoding_batchfilepart_index")
        ]

    def __str__(self) -> str:
        return f"part {self.index} of {self.file_id}"


class Batch(models.Model):
    """A batch of OpenAI's Batch API: each line of its input file becomes an ordinary job with its
    own trail (BatchLine), fed to the workers behind its matter's calls (decoding.batches)."""

    class Status(models.TextChoices):
        VALIDATING = "validating"
        FAILED = "failed"
        IN_PROGRESS = "in_progress"
        FINALIZING = "finalizing"
        COMPLETED = "completed"
        EXPIRED = "expired"
        CANCELLING = "cancelling"
        CANCELLED = "cancelled"

    ENDED = (Status.FAILED, Status.COMPLETED, Status.EXPIRED, Status.CANCELLED)

    id = models.CharField(primary_key=True, max_length=40, default=_batch_id, editable=False)
    matter = models.ForeignKey(Matter, on_delete=models.PROTECT, related_name="batches")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    endpoint = models.CharField(max_length=40)
    input_file = models.ForeignKey(BatchFile, on_delete=models.PROTECT, related_name="+")
    output_file = models.ForeignKey(
        BatchFile, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    error_file = models.ForeignKey(
        BatchFile, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    completion_window = models.CharField(max_length=8)
    metadata = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.VALIDATING, db_index=True
    )
    # OpenAI's `errors` of a batch that failed as a whole (its input could not be read).
    errors = models.JSONField(null=True, blank=True)
    # Input lines already made into BatchLines: a restarted expansion resumes here.
    lines_expanded = models.PositiveIntegerField(default=0)
    # The line (its feed key, then its number) through which the feeder has sent lines' jobs:
    # lines go in feed-key order (decoding.feed_order: a document's lines side by side), and the
    # next feed reads on from here, never over the lines already sent.
    sent_through_key = models.BinaryField(default=b"")
    sent_through_line = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class BatchLine(models.Model):
    """One line of a batch's input: the job it became, or the refusal the endpoint would have
    given its body (which goes to the error file; the batch goes on)."""

    batch = models.ForeignKey(Batch, on_delete=models.PROTECT, related_name="lines")
    line = models.PositiveIntegerField(help_text="1-based line number in the input file")
    # Null only for a line that is not a JSON object with a string custom_id.
    custom_id = models.CharField(max_length=512, null=True, blank=True)
    job = models.OneToOneField(
        GenerationJob, on_delete=models.PROTECT, null=True, blank=True, related_name="batch_line"
    )
    # How many alternatives each token's logprobs show in the response; null: none asked.
    logprobs_top = models.PositiveSmallIntegerField(null=True, blank=True)
    # {"status_code", "body"}: what the endpoint would have answered this line's request.
    refusal = models.JSONField(null=True, blank=True)
    # Where the feeder sends it (decoding.feed_order.feed_key of its prompt; empty: a refusal).
    feed_key = models.BinaryField(default=b"")

    class Meta:
        ordering = ["batch", "line"]
        indexes = [
            models.Index(fields=["batch", "feed_key", "line"], name="decoding_batchline_feed"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["batch", "line"], name="decoding_batchline_line"),
            models.UniqueConstraint(
                fields=["batch", "custom_id"],
                condition=models.Q(custom_id__isnull=False),
                name="decoding_batchline_custom_id",
            ),
        ]

    def __str__(self) -> str:
        return f"line {self.line} of {self.batch_id}"
