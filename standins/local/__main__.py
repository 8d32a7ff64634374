"""``python -m standins.local [run_embedded options]``: ``make run`` with the stand-ins.

What ``QTG_VENUES=local make run`` (and ``make run-local``) runs: movements' ``run_embedded``
(migrate, seed, web + worker + beat), with :func:`standins.local.start_standins` plugged into
its port for local services, so the stand-ins start first and stop with it.
"""

import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")
    os.environ.setdefault("QTG_VENUES", "local")
    import django
    from django.core.management import execute_from_command_line

    django.setup()
    from movements import ports
    from standins.local import start_standins

    ports.provide_embedded_services(start_standins)
    execute_from_command_line(["manage.py", "run_embedded", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
