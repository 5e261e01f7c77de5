from django.urls import path

from rlweb.projects import views

urlpatterns = [
    path("", views.project_list, name="project-list"),
    path("<int:project_id>/", views.project_detail, name="project-detail"),
    path("<int:project_id>/members/", views.member_add, name="project-member-add"),
    path("<int:project_id>/members/remove/", views.member_remove, name="project-member-remove"),
]
