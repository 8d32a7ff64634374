from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
    verbose_name = "Sandbox venues"

    def ready(self) -> None:
        from sandbox import executors  # noqa: F401  (registers the simulated venues' executors)
