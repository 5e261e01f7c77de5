from django.contrib.auth import views as auth_views
from django.urls import path

from rlweb.accounts import views
from rlweb.accounts.throttle import SignInForm

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("login/", auth_views.LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("invitations/<str:token>/", views.invitation_accept, name="invitation-accept"),
    path("users/", views.user_list, name="user-list"),
    path("users/new/", views.user_create, name="user-create"),
    path("users/<int:user_id>/unlock/", views.user_unlock, name="user-unlock"),
    path("users/signup/", views.signup_switch, name="signup-switch"),
    path("users/invitations/new/", views.invitation_create, name="invitation-create"),
    path("users/invitations/<int:invitation_id>/revoke/", views.invitation_revoke, name="invitation-revoke"),
]
