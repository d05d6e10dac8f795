from django.apps import AppConfig


class ReliableQConfig(AppConfig):
    name = "reliableq"
    verbose_name = "ReliableQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, registry, schedule_checks  # noqa: F401  (checks register themselves)

        # Like admin.py: every installed app's jobs.py registers its handlers now.
        registry.autodiscover()
