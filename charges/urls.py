"""The charge service's HTTP routes."""

app_name = "charges"
urlpatterns: list = []
