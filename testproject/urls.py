import os

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("reliableq.urls")),
    path("", include("charges.urls")),
]

if os.environ.get("TESTPROJECT_BENCH_VIEWS") == "1":
    # Unauthenticated ceilings for the HTTP benchmark only (see testproject/bench_views.py).
    urlpatterns.append(path("", include("testproject.bench_views")))
