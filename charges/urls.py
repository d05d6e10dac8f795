"""The charge service's HTTP routes."""

from django.urls import path

from . import views

app_name = "charges"
urlpatterns = [
    path("v1/charges", views.ChargeListView.as_view(), name="charge-list"),
    path("v1/charges/<str:charge_id>", views.ChargeDetailView.as_view(), name="charge-detail"),
]
