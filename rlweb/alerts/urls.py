from django.urls import path

from rlweb.alerts import views

urlpatterns = [
    path("account/alerts/", views.alert_settings, name="alert-settings"),
    path("experiments/<int:experiment_id>/alerts/", views.experiment_alerts, name="experiment-alerts"),
]
