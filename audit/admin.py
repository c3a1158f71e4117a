"""Audit rows in the admin: visible to operators, never editable (the triggers agree)."""

from django.contrib import admin
from django.core.paginator import Paginator
from django.utils.functional import cached_property

from .models import Checkpoint, DecisionRecord, LedgerEntry, TaskLock, Trail, VerificationRun


class CappedCountPaginator(Paginator):
    """Counts at most CAP + 1 rows: an audit table may hold billions, and the admin's page
    count is not worth a full scan. Beyond the cap, narrow the list with search or filters."""

    CAP = 10_000

    @cached_property
    def count(self):
        return len(self.object_list.values_list("pk", flat=True)[: self.CAP + 1])


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False  # no full-table COUNT on large audit tables
    paginator = CappedCountPaginator

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Trail)
class TrailAdmin(ReadOnlyAdmin):
    list_display = (
        "id", "job_id", "attempt", "previous_id", "status", "outcome", "record_count", "created_at"
    )  # fmt: skip
    list_filter = ("status", "outcome")
    search_fields = ("=id", "=job_id")


@admin.register(DecisionRecord)
class DecisionRecordAdmin(ReadOnlyAdmin):
    list_display = ("trail_id", "seq", "record_hash", "created_at")
    search_fields = ("=trail__id",)
    list_select_related = False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("seq", "trail_id", "entry_hash", "created_at")
    search_fields = ("=trail_id",)


@admin.register(VerificationRun)
class VerificationRunAdmin(ReadOnlyAdmin):
    list_display = ("scope", "ok", "trails_checked", "records_checked", "started_at")
    list_filter = ("ok",)


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("id", "tree_size", "root_hash", "created_at")


@admin.register(TaskLock)
class TaskLockAdmin(ReadOnlyAdmin):
    list_display = ("name", "holder", "locked_until")
