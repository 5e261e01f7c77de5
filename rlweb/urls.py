from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("rlweb.accounts.urls")),
    path("", include("rlweb.experiments.urls")),
    path("sweeps/", include("rlweb.sweeps.urls")),
]
