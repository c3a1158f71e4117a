"""Staff grant matters to reviewers here, and place or release a matter's legal hold and set its
retention (each a custody event, reviewers.records); the portal's records are shown read-only."""

from django import forms
from django.contrib import admin, messages

from audit.admin import ReadOnlyAdmin
from decoding.models import Matter

from .models import Annotation, CustodyEvent, MatterGrant, SignOff, TrailVerification
from .records import RecordsRefusal, hold_off, hold_on, retention_set


class MatterForm(forms.ModelForm):
    place_hold = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Place a legal hold, for this reason",
        help_text="The order or notice. While a hold is on, nothing of the matter is destroyed.",
    )
    release_hold = forms.BooleanField(required=False, label="Release the legal hold")

    class Meta:
        model = Matter
        fields = ("name", "retention_days")


@admin.register(Matter)
class MatterAdmin(admin.ModelAdmin):
    form = MatterForm
    list_display = ("name", "created_at", "on_hold", "hold_since", "retention_days")
    list_filter = (("hold_since", admin.EmptyFieldListFilter),)
    search_fields = ("name",)
    readonly_fields = ("hold_reason", "hold_since", "hold_by", "created_at")

    @admin.display(boolean=True, description="legal hold")
    def on_hold(self, obj):
        return obj.on_hold

    def get_readonly_fields(self, request, obj=None):
        # A matter's name is bound into its trails' request records and its leaves' tags.
        named = ("name",) if obj is not None else ()
        return (*named, *self.readonly_fields)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("name", "retention_days")
        switch = "release_hold" if obj.on_hold else "place_hold"
        return ("name", "created_at", "retention_days", "hold_reason", "hold_since", "hold_by",
                switch)  # fmt: skip

    def save_model(self, request, obj, form, change):
        """The hold and the retention through reviewers.records, so each change is logged."""
        days = form.cleaned_data.get("retention_days")
        if not change:
            obj.retention_days = None
            obj.save()
        try:
            if days != (form.initial.get("retention_days") if change else None):
                retention_set(matter_name=obj.name, days=days, user=request.user, run_by="admin")
            if form.cleaned_data.get("place_hold", "").strip():
                hold_on(
                    matter_name=obj.name,
                    reason=form.cleaned_data["place_hold"],
                    user=request.user,
                    run_by="admin",
                )
            if form.cleaned_data.get("release_hold"):
                hold_off(matter_name=obj.name, user=request.user, run_by="admin")
        except RecordsRefusal as exc:
            self.message_user(request, str(exc), messages.ERROR)
        obj.refresh_from_db()


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
