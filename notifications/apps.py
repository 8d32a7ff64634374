from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from movements.ports import Notifier, provide_notifications
        from notifications import tasks  # noqa: F401  (registers the tasks by name)
        from notifications.services import notify

        provide_notifications(Notifier(notify=notify))
