from django.contrib import admin

from rlweb.projects.models import Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    raw_id_fields = ["user"]
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """Projects and their members, for the admin (a project's owner manages its members on its own page)."""

    list_display = ["name", "owner", "created", "members"]
    search_fields = ["name", "owner__username"]
    raw_id_fields = ["owner"]
    inlines = [MembershipInline]

    @admin.display(description="Members")
    def members(self, project: Project) -> int:
        return project.memberships.count()
