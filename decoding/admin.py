from django.contrib import admin, messages

from .models import ApiKey, GenerationJob, Matter, ModelSpec
from .services import api_key_revoke


@admin.register(Matter)
class MatterAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "matter", "prefix", "scopes", "created_at", "expires_at", "revoked_at")
    list_filter = ("matter",)
    readonly_fields = ("prefix", "key_hash", "created_at", "revoked_at")
    search_fields = ("name", "prefix")
    actions = ["revoke"]

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        revoked = sum(api_key_revoke(key=key) for key in queryset)
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)

    def has_add_permission(self, request):
        # The raw key must be shown once to its owner: create keys with `manage.py create_api_key`.
        return False


@admin.register(GenerationJob)
class GenerationJobAdmin(admin.ModelAdmin):
    list_display = ("id", "matter", "status", "request_id", "created_at", "finished_at")
    list_filter = ("status", "matter")
    search_fields = ("=id", "request_id")
    show_full_result_count = False
    readonly_fields = [field.name for field in GenerationJob._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(ModelSpec)
class ModelSpecAdmin(admin.ModelAdmin):
    """Saving runs ModelSpec.clean(): a draft whose vocabulary differs is refused here."""

    list_display = ("name", "provider", "drafter", "draft_schedule", "updated_at")
    search_fields = ("name",)
