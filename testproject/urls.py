from django.contrib import admin
from django.urls import include, path

from testproject import bench_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("reliableq.urls")),
    path("", include("charges.urls")),
]

if bench_views.key() is not None:
    # Unauthenticated ceilings for the HTTP benchmark only, behind its key (see testproject/bench_views.py).
    urlpatterns.append(path("", include("testproject.bench_views")))
