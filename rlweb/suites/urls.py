from django.urls import path

from rlweb.suites import views

urlpatterns = [
    path("", views.suite_list, name="suite-list"),
    path("new/", views.suite_new, name="suite-new"),
    path("<int:suite_id>/", views.suite_detail, name="suite-detail"),
    path("<int:suite_id>/data.json", views.suite_data, name="suite-data"),
    path("<int:suite_id>/scores.csv", views.suite_csv, name="suite-csv"),
    path("<int:suite_id>/aggregates.csv", views.suite_aggregates_csv, name="suite-aggregates-csv"),
    path("<int:suite_id>/report.html", views.suite_report, name="suite-report"),
    path("<int:suite_id>/cancel/", views.suite_cancel, name="suite-cancel"),
    path("<int:suite_id>/delete/", views.suite_delete, name="suite-delete"),
]
