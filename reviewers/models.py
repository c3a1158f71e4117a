"""The reviewer portal's own rows: who may see which matter, what reviewers concluded, and the
chain-of-custody log of everything they did (reviewers.custody specifies its hash format)."""

from django.conf import settings
from django.db import models

from decoding.models import GenerationJob, Matter


class MatterGrant(models.Model):
    """A reviewer may see a matter's trails only while this row exists (staff manage them)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="matter_grants"
    )
    matter = models.ForeignKey(Matter, on_delete=models.CASCADE, related_name="grants")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["matter", "user"]
        constraints = [
            models.UniqueConstraint(fields=["user", "matter"], name="reviewers_grant_user_matter")
        ]

    def __str__(self) -> str:
        return f"{self.user} reviews {self.matter}"


class TrailVerification(models.Model):
    """One run of the portal's verify action on one trail: its chain and its inclusion in the
    signed global log."""

    job = models.ForeignKey(GenerationJob, on_delete=models.PROTECT, related_name="+")
    trail_id = models.UUIDField(db_index=True)
    ok = models.BooleanField()
    first_failure = models.TextField(blank=True)
    checkpoint_size = models.PositiveBigIntegerField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"trail {self.trail_id} {'verified' if self.ok else 'BROKEN'} at {self.at}"


class Annotation(models.Model):
    """A reviewer's note on a trail, or on one step of it."""

    job = models.ForeignKey(GenerationJob, on_delete=models.PROTECT, related_name="+")
    trail_id = models.UUIDField()
    step = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        where = f"step {self.step}" if self.step is not None else "the trail"
        return f"note by {self.user} on {where} of job {self.job_id}"


class SignOff(models.Model):
    """ "Reviewed and verified by NAME at TIME", given only on an ok verification."""

    job = models.ForeignKey(GenerationJob, on_delete=models.PROTECT, related_name="+")
    trail_id = models.UUIDField()
    verification = models.ForeignKey(
        TrailVerification, on_delete=models.PROTECT, related_name="sign_offs"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"reviewed and verified by {self.user} at {self.at:%Y-%m-%d %H:%M:%S %Z}"


class CustodyEvent(models.Model):
    """One reviewer action, chained like the audit records (see reviewers.custody).

    `payload` is the exact canonical JSON text that is hashed; `action`, `job_id`, `trail_id`,
    `detail` (the canonical JSON text of the payload's "detail") and `created_at` are copies
    for queries, checked against the payload by custody_verify. Append-only in the database
    (migration 0002).
    """

    class Action(models.TextChoices):
        VIEW = "view"
        VERIFY = "verify"
        REPLAY = "replay"
        EXPORT = "export"
        EXPORT_MATTER = "export_matter"  # a whole matter's bundle: no job, the trails in detail
        ANNOTATE = "annotate"
        SIGN_OFF = "sign_off"
        # Records management (reviewers.holds, reviewers.destruction): job null, the matter
        # and what was done in detail.
        LEGAL_HOLD = "legal_hold"
        RELEASE_HOLD = "release_hold"
        RETENTION = "retention"
        DESTROY = "destroy"

    id = models.BigAutoField(primary_key=True)
    seq = models.PositiveBigIntegerField(unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    action = models.CharField(max_length=16, choices=Action.choices)
    # Plain ids, as in audit: the custody log must name what was touched even if it goes away.
    job_id = models.UUIDField(null=True, blank=True, db_index=True)
    trail_id = models.UUIDField(null=True, blank=True)
    detail = models.TextField()
    payload = models.TextField()
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64, unique=True)
    event_hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"custody event {self.seq}: {self.action} by {self.user_id}"


class CustodyPending(models.Model):
    """A page view waiting to be chained (reviewers.services.custody_chain_pending): a view is
    written here without waiting on the chain's one writer, and chained moments later, in the
    order the views were written, by whichever request or task next holds the chain."""

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    job_id = models.UUIDField(null=True, blank=True)
    trail_id = models.UUIDField(null=True, blank=True)
    detail = models.JSONField(default=dict)
    at = models.DateTimeField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"pending view by {self.user_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class CustodyPoint(models.Model):
    """A verified-up-to point of the custody chain: every event up to `seq` verified, the event
    at `seq` hashing to `event_hash`, under a MAC keyed by the secret key (reviewers.custody),
    so the custody page checks only what was chained since. Append-only."""

    id = models.BigAutoField(primary_key=True)
    seq = models.PositiveBigIntegerField()
    event_hash = models.CharField(max_length=64)
    mac = models.CharField(max_length=64)
    full_walk = models.BooleanField(default=False)  # made by walking the chain from its start
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"custody verified through seq {self.seq}"
