from django.apps import AppConfig


class CallbacksConfig(AppConfig):
    name = "callbacks"
    verbose_name = "Callbacks"

    def ready(self) -> None:
        from callbacks import tasks  # noqa: F401  (registers the delivery tasks by name)
        from callbacks.services import (
            callback_enqueue,
            events_recorded_together,
            last_sequence,
            sequences_known,
            subscriptions_read_once,
        )
        from movements.ports import CallbackOutbox, provide_callbacks

        provide_callbacks(
            CallbackOutbox(
                enqueue=callback_enqueue,
                read_once=subscriptions_read_once,
                together=events_recorded_together,
                last_sequence=last_sequence,
                sequences_known=sequences_known,
            )
        )
