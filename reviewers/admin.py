"""Staff grant matters to reviewers here; the portal's records are shown read-only."""

from django.contrib import admin

from audit.admin import ReadOnlyAdmin

from .models import Annotation, CustodyEvent, MatterGrant, SignOff, TrailVerification


@admin.register(MatterGrant)
class MatterGrantAdmin(admin.ModelAdmin):
    list_display = ("user", "matter", "created_at")
    list_filter = ("matter",)
    search_fields = ("user__username", "matter__name")
    autocomplete_fields = ("user", "matter")


@admin.register(TrailVerification)
class TrailVerificationAdmin(ReadOnlyAdmin):
    list_display = ("trail_id", "job", "ok", "first_failure", "user", "at")
    list_filter = ("ok",)
    search_fields = ("=trail_id", "=job__id")


@admin.register(Annotation)
class AnnotationAdmin(ReadOnlyAdmin):
    list_display = ("job", "step", "user", "created_at")
    search_fields = ("=job__id", "=trail_id")


@admin.register(SignOff)
class SignOffAdmin(ReadOnlyAdmin):
    list_display = ("job", "trail_id", "user", "at")
    search_fields = ("=job__id", "=trail_id")


@admin.register(CustodyEvent)
class CustodyEventAdmin(ReadOnlyAdmin):
    list_display = ("seq", "created_at", "user", "action", "job_id", "event_hash")
    list_filter = ("action",)
    search_fields = ("=job_id", "=trail_id", "user__username")
