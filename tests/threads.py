"""Threads a test starts, each with its own database connection, as worker processes have."""

import functools
from collections.abc import Callable

from django.db import connection


def own_connection(errors: list[BaseException]) -> Callable:
    """Decorate a thread's target: what it raises goes into ``errors``, for the main thread to
    report (a thread must not die silently), and the connection it opened is closed when it
    ends."""

    def decorate(target: Callable) -> Callable:
        @functools.wraps(target)
        def run(*args, **kwargs) -> None:
            try:
                target(*args, **kwargs)
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        return run

    return decorate
