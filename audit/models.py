"""The append-only audit store. Rows here are written only through audit.store and are protected
by database triggers (migration 0002) as well as by the hash chain that audit.evidence.chain
verifies."""

import uuid

from django.db import models


class Trail(models.Model):
    """One job attempt's chain of decision records. Its id keys the genesis hash."""

    class Status(models.TextChoices):
        OPEN = "open"
        SEALED = "sealed"

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        ABANDONED = "abandoned"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # A plain id, not a foreign key: the audit store must not depend on decoding (it outlives jobs).
    job_id = models.UUIDField(db_index=True)
    attempt = models.PositiveIntegerField(default=1)
    # The trail of the job's previous attempt (sealed "abandoned" when its worker died).
    previous_id = models.UUIDField(null=True, blank=True)
    # 1: decision records only; 2: a request record first and an answer record last
    # (audit.evidence.binding); 3: as 2, with each decision's tokens sealed
    # (audit.evidence.sealing). Fixed when the trail opens, like its id.
    format_version = models.PositiveSmallIntegerField(default=1)
    # v2: the secret (hex) from which the salts of the trail's bound texts derive; never in a
    # record, so a withheld text cannot be confirmed by guessing.
    salt = models.CharField(max_length=64, blank=True, default="")
    # The batch whose line this attempt's job is ("" for none): its leaf's batch_tag says so to
    # whoever holds the matter's key (audit.evidence.matter_leaves.batch_tag).
    batch_id = models.CharField(max_length=40, blank=True, default="")
    genesis_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    record_count = models.PositiveIntegerField(default=0)
    head_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    sealed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["job_id", "attempt"], name="audit_trail_job_attempt")
        ]

    def __str__(self) -> str:
        return f"trail {self.id} (job {self.job_id}, attempt {self.attempt})"


class DecisionRecord(models.Model):
    """One record of a trail: a speculative step, or (format v2) the request or the answer.
    `payload` holds the canonical JSON exactly as hashed; `kind` is a copy of its kind for
    queries, which verification checks against the payload."""

    class Kind(models.TextChoices):
        REQUEST = "request"
        DECISION = "decision"
        ANSWER = "answer"

    id = models.BigAutoField(primary_key=True)  # surrogate key for the admin; never chained by
    trail = models.ForeignKey(Trail, on_delete=models.PROTECT, related_name="records")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DECISION)
    payload = models.TextField()
    # Format 3 decisions: canonical JSON of the values of the slots the payload commits to
    # (audit.evidence.sealing), kept like the trail's salt, never hashed; "" otherwise.
    openings = models.TextField(blank=True, default="")
    prev_hash = models.CharField(max_length=64)
    record_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["trail", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["trail", "seq"], name="audit_record_trail_seq"),
            models.UniqueConstraint(fields=["trail", "prev_hash"], name="audit_record_trail_prev"),
        ]
        indexes = [
            # The request and answer records alone, which every run compares with job rows.
            models.Index(
                fields=["trail", "seq"],
                condition=~models.Q(kind="decision"),
                name="audit_record_bound",
            )
        ]

    def __str__(self) -> str:
        return f"record {self.seq} of trail {self.trail_id}"


class LedgerEntry(models.Model):
    """Level two: one leaf per sealed trail, chained over all trails."""

    id = models.BigAutoField(primary_key=True)
    seq = models.PositiveBigIntegerField(unique=True)
    trail_id = models.UUIDField(unique=True)  # not a foreign key: a deleted trail must be noticed
    payload = models.TextField()
    prev_hash = models.CharField(max_length=64, unique=True)
    entry_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"ledger entry {self.seq}"


class VerificationRun(models.Model):
    """verify_chain records each of its own runs, so reviewers can see when the store was last
    checked and with what result."""

    id = models.BigAutoField(primary_key=True)
    scope = models.CharField(max_length=200)
    ok = models.BooleanField()
    trails_checked = models.PositiveIntegerField(default=0)
    records_checked = models.PositiveBigIntegerField(default=0)
    ledger_entries_checked = models.PositiveBigIntegerField(default=0)
    failures = models.JSONField(default=list)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    # A run of the whole store that found it intact leaves its verified-up-to point
    # (audit.anchored): the checkpoint it verified, the snapshot it read and their MAC.
    records_covered = models.PositiveBigIntegerField(default=0)
    anchored_size = models.PositiveBigIntegerField(null=True, blank=True)
    anchored_root = models.CharField(max_length=64, blank=True)
    snapshot_xmin = models.BigIntegerField(null=True, blank=True)
    point_mac = models.CharField(max_length=64, blank=True)

    class Meta:
        # By id, the order the database gave: started_at is a timestamp the application writes.
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"verification of {self.scope}: {'intact' if self.ok else 'BROKEN'}"


class Checkpoint(models.Model):
    """A signed statement of the global log's size and Merkle root (C2SP tlog-checkpoint).

    Meant to leave the database: a chain inside the database only catches tampering by someone
    who cannot also rewrite the checkpoints that were published or handed over.
    """

    id = models.BigAutoField(primary_key=True)
    tree_size = models.PositiveBigIntegerField()
    root_hash = models.CharField(max_length=64)
    note = models.TextField(help_text="the signed note with its cosignatures, as published")
    # The RFC 3161 timestamp response over the note's bytes (DER), when an authority is set.
    timestamp_token = models.BinaryField(null=True, blank=True)
    # The log key's Ed25519 signature of the root under the COSE receipt header (ADR 0030):
    # one signature serves the receipt of every leaf the checkpoint covers.
    receipt_signature = models.BinaryField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"checkpoint of {self.tree_size} trails ({self.created_at:%Y-%m-%d %H:%M})"


class LogTile(models.Model):
    """A full C2SP tlog-tile of the global log's Merkle tree (audit.tiles): 256 hashes of one
    level. Derived from the ledger, stored once its 256 hashes exist, never changed; every
    verification recomputes them from the leaves."""

    id = models.BigAutoField(primary_key=True)
    level = models.PositiveSmallIntegerField()
    index = models.PositiveBigIntegerField()
    hashes = models.BinaryField()  # 8,192 bytes: 256 SHA-256 hashes, left to right
    root = models.BinaryField()  # the tile's own Merkle Tree Hash: a hash of the level above

    class Meta:
        ordering = ["level", "index"]
        constraints = [
            models.UniqueConstraint(fields=["level", "index"], name="audit_logtile_level_index")
        ]

    def __str__(self) -> str:
        return f"tile {self.level}/{self.index}"


class MatterKey(models.Model):
    """The secret with which a matter's leaves are tagged in the public log
    (audit.evidence.matter_leaves): made when the matter's first trail is sealed, never
    changed, disclosed in the matter's bundles so an examiner can find every leaf of it."""

    matter = models.CharField(max_length=200, unique=True)
    key = models.CharField(max_length=64)  # 32 random bytes, hex
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"tag key of matter {self.matter}"


class TaskLock(models.Model):
    """A named lease for periodic work, so that only one runner does it at a time however many
    beat or worker processes fire it (portable: a conditional UPDATE, on SQLite too)."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200, blank=True)
    locked_until = models.DateTimeField()
    # Set by a runner that found the lease held (locks.run_coalesced): the holder runs once more.
    asked_again = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.name} (held by {self.holder or 'nobody'} until {self.locked_until})"


class Erasure(models.Model):
    """A trail whose texts were destroyed under an order (reviewers.destruction): its job's
    texts, its salt and its decisions' openings are gone, its records, leaf and commitments
    kept. Append-only; the triggers (migration 0015) blank a trail's salt or a record's
    openings only where such a row exists, and verification accepts what is missing only then."""

    id = models.BigAutoField(primary_key=True)
    trail_id = models.UUIDField(unique=True)
    job_id = models.UUIDField(db_index=True)
    matter = models.CharField(max_length=200)
    order = models.TextField(help_text="the order or retention rule it was destroyed under")
    erased_by = models.CharField(max_length=200)
    erased_at = models.DateTimeField()

    class Meta:
        ordering = ["-erased_at", "-id"]

    def __str__(self) -> str:
        return f"trail {self.trail_id} destroyed {self.erased_at:%Y-%m-%d} under {self.order}"
