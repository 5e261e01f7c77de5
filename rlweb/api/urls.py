from django.urls import path

from rlweb.api import views

urlpatterns = [
    path("", views.token_list, name="token-list"),
    path("<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
]
