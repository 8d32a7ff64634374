"""Runtime settings a deployment behind a proxy needs: a shared cache for the throttles
(QTG_CACHE_URL), CSRF trusted origins and the forwarded host; gunicorn's control socket in the
var dir (not ~/.gunicorn/, shared by every gunicorn of the host)."""

import json

from tests.security.test_profile import manage

SHOW = (
    "import json; from django.conf import settings as s; print(json.dumps({"
    "'cache': s.CACHES['default'], 'origins': s.CSRF_TRUSTED_ORIGINS, "
    "'forwarded': s.USE_X_FORWARDED_HOST}))"
)


def show(tmp_path, **env) -> dict:
    result = manage("shell", "-c", SHOW, tmp_path=tmp_path, QTG_PROFILE="embedded", **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_cache_csrf_origins_and_forwarded_host_come_from_the_environment(tmp_path):
    default = show(tmp_path)
    configured = show(
        tmp_path,
        QTG_CACHE_URL="redis://127.0.0.1:6379/13",
        DJANGO_CSRF_TRUSTED_ORIGINS="https://qtg.example.com, https://ops.example.com",
        DJANGO_USE_X_FORWARDED_HOST="1",
    )

    assert default["cache"]["BACKEND"].endswith("LocMemCache")
    assert (default["origins"], default["forwarded"]) == ([], False)
    assert configured["cache"] == {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:6379/13",
    }
    assert configured["origins"] == ["https://qtg.example.com", "https://ops.example.com"]
    assert configured["forwarded"] is True


def test_a_cache_url_that_is_not_redis_stops_the_start(tmp_path):
    result = manage(
        "check", tmp_path=tmp_path, QTG_PROFILE="embedded", QTG_CACHE_URL="memcached://x"
    )

    assert result.returncode != 0
    assert "QTG_CACHE_URL must be a redis://" in result.stderr


def test_gunicorns_control_socket_is_in_the_var_dir():
    from tests.ops.test_deploy import procfile

    assert "--control-socket ${QTG_VAR_DIR:-var}/gunicorn.ctl" in procfile()["web"]
