from django.contrib import admin
from django.urls import include, path

from rlweb.api.api import urls as api_urls

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("rlweb.accounts.urls")),
    path("", include("rlweb.experiments.urls")),
    path("sweeps/", include("rlweb.sweeps.urls")),
    path("suites/", include("rlweb.suites.urls")),
    path("projects/", include("rlweb.projects.urls")),
    path("runs/", include("rlweb.logged.urls")),
    path("api/", api_urls()),
    path("account/tokens/", include("rlweb.api.urls")),
    path("", include("rlweb.alerts.urls")),
]
