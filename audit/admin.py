"""Audit rows in the admin: visible to operators, never editable (the triggers agree)."""

from django.contrib import admin

from .models import Checkpoint, DecisionRecord, LedgerEntry, Trail, VerificationRun


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False  # no full-table COUNT on large audit tables

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Trail)
class TrailAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_id", "attempt", "status", "outcome", "record_count", "created_at")
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
