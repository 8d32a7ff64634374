"""Error reports (DEBUG pages, error e-mails) without credentials.

Django hides settings whose names look secret (KEY, PASS, TOKEN, ...), but ``DATABASE_URL`` and
``CELERY_BROKER_URL`` carry their password inside the URL, in the settings and in the
environment the request's META shows. This filter masks the password of any URL it reports.
"""

import re

from django.views.debug import SafeExceptionReporterFilter

# scheme://user:password@host -> scheme://user:********@host
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)(?P<password>[^@\s]*)@")


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by stars."""
    return _URL_PASSWORD.sub(
        lambda m: f"{m['head']}{SafeExceptionReporterFilter.cleansed_substitute}@", text
    )


class CredentialMaskingFilter(SafeExceptionReporterFilter):
    def cleanse_setting(self, key, value):
        value = super().cleanse_setting(key, value)
        # Plain strings only: a lazy object (some apps put them in settings) stays unevaluated.
        if type(value) is str:
            return mask_url_passwords(value)
        return value
