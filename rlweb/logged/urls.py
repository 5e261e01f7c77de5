from django.urls import path

from rlweb.logged import views

urlpatterns = [
    path("import-tensorboard/", views.import_tensorboard, name="tensorboard-import"),
    path("log-from-a-script/", views.log_guide, name="log-guide"),
    path("rlweb-client.zip", views.client_archive, name="client-archive"),
]
