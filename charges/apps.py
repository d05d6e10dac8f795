from django.apps import AppConfig


class ChargesConfig(AppConfig):
    name = "charges"
    verbose_name = "Charges"
    default_auto_field = "django.db.models.BigAutoField"
    reliableq_openapi = "charges.schema.fragment"  # its routes in /v1/schema
