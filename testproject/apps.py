from django.apps import AppConfig


class TestprojectConfig(AppConfig):
    name = "testproject"
    verbose_name = "ReliableQ test project"
