"""pytest plugin (``-p tests.embedded_profile`` in pyproject.toml): a bare ``python -m pytest``
runs the suite on the embedded profile, as ``make test`` does.

Loaded before pytest-django reads the settings, which refuse to start without a profile.
"""

import os

os.environ.setdefault("QTG_PROFILE", "embedded")
