"""ReliableQ's HTTP routes (the DRF API lives in reliableq.api)."""

from django.urls import path  # noqa: F401

app_name = "reliableq"
urlpatterns: list = []
