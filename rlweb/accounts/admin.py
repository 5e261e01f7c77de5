from django.contrib import admin

from rlweb.accounts.models import Invitation, LoginFailure, SiteSettings


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["id", "note", "created_by", "created", "expires_at", "used_by", "used_at", "revoked_at"]


@admin.register(LoginFailure)
class LoginFailureAdmin(admin.ModelAdmin):
    """Delete rows here to lift a delay early (or use the Users page's Clear button)."""
    list_display = ["username", "ip", "at"]
    search_fields = ["username", "ip"]


admin.site.register(SiteSettings)
