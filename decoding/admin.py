"""The operators' admin: matters, keys (the secret shown once, revocation), jobs (retry and
cancel), model specs. Actions call the same services as the API."""

from django.contrib import admin, messages

from .models import ApiKey, GenerationJob, ModelSpec
from .services import (
    JobFinished,
    QueueUnavailable,
    api_key_issue,
    api_key_revoke,
    job_cancel,
    job_retry,
)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "matter", "prefix", "scopes", "created_at", "expires_at", "revoked_at")
    list_filter = ("matter",)
    fields = (
        "matter", "name", "owner", "scopes", "expires_at", "prefix", "created_at", "revoked_at"
    )  # fmt: skip
    readonly_fields = ("prefix", "created_at", "revoked_at")
    search_fields = ("name", "prefix")
    actions = ["revoke"]

    def save_model(self, request, obj, form, change):
        if change:
            obj.save()
            return
        raw_key = api_key_issue(obj)
        # Shown once, here; only its SHA-256 is stored.
        self.message_user(
            request,
            f"API key {obj.name!r} created. Copy it now, it is not shown again: {raw_key}",
            messages.WARNING,
        )

    def has_delete_permission(self, request, obj=None):
        return False  # jobs refer to their key; revoke it instead

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        revoked = sum(api_key_revoke(key=key) for key in queryset)
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)


@admin.register(GenerationJob)
class GenerationJobAdmin(admin.ModelAdmin):
    list_display = (
        "id", "matter", "model_spec", "status", "attempts", "request_id", "created_at",
        "finished_at",
    )  # fmt: skip
    list_filter = ("status", "matter", "model_spec", "stream")
    search_fields = ("=id", "request_id")
    date_hierarchy = "created_at"
    show_full_result_count = False
    readonly_fields = [field.name for field in GenerationJob._meta.fields]
    actions = ["retry", "cancel"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # a job is the reason its trails exist

    @admin.action(description="Retry the selected failed jobs (a new attempt, a new trail)")
    def retry(self, request, queryset):
        retried = skipped = 0
        for job in queryset:
            try:
                if job_retry(job=job):
                    retried += 1
                else:
                    skipped += 1
            except QueueUnavailable as exc:
                self.message_user(request, f"The queue is unavailable: {exc}", messages.ERROR)
                return
        self.message_user(
            request, f"Queued {retried} job(s) again; {skipped} had not failed.", messages.SUCCESS
        )

    @admin.action(description="Cancel the selected jobs (at their next step boundary)")
    def cancel(self, request, queryset):
        cancelled = finished = 0
        for job in queryset:
            try:
                job_cancel(job=job)
                cancelled += 1
            except JobFinished:
                finished += 1
        self.message_user(
            request,
            f"Cancelled {cancelled} job(s); {finished} had already finished.",
            messages.SUCCESS,
        )


@admin.register(ModelSpec)
class ModelSpecAdmin(admin.ModelAdmin):
    """Saving runs ModelSpec.clean(): a draft whose vocabulary differs is refused here."""

    list_display = (
        "name",
        "provider",
        "drafter",
        "draft_schedule",
        "default_params",
        "default_params_source",
        "updated_at",
    )
    search_fields = ("name",)
