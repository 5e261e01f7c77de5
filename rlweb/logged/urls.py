from django.urls import path

from rlweb.logged import views

urlpatterns = [
    path("import-tensorboard/", views.import_tensorboard, name="tensorboard-import"),
]
