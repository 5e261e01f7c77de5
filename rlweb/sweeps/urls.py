from django.urls import path

from rlweb.sweeps import views

urlpatterns = [
    path("", views.sweep_list, name="sweep-list"),
    path("new/", views.sweep_new, name="sweep-new"),
    path("<int:sweep_id>/", views.sweep_detail, name="sweep-detail"),
    path("<int:sweep_id>/data.json", views.sweep_data, name="sweep-data"),
    path("<int:sweep_id>/figures.json", views.sweep_figures, name="sweep-figures"),
    path("<int:sweep_id>/cancel/", views.sweep_cancel, name="sweep-cancel"),
    path("<int:sweep_id>/extend/", views.sweep_extend, name="sweep-extend"),
    path("<int:sweep_id>/delete/", views.sweep_delete, name="sweep-delete"),
    path("<int:sweep_id>/launch-best/", views.sweep_launch_best, name="sweep-launch-best"),
]
