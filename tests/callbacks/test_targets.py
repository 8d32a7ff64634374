"""Target URL validation: http(s) only, and no private, loopback or link-local addresses
unless QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS is on."""

import pytest
from django.core.exceptions import ValidationError

from callbacks.models import Subscription
from callbacks.targets import TargetRefused, validate_target_url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/x",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "http:///no-host",
        "https://user:pw@hooks.example.com/x",
        "http://[::1/broken",
        "",
    ],
)
def test_only_plain_http_and_https_urls_with_a_host_are_accepted(url):
    with pytest.raises(TargetRefused):
        validate_target_url(url, allow_private=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "https://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://172.16.5.5/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "http://[fe80::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_private_loopback_and_link_local_targets_are_refused_by_default(url):
    with pytest.raises(TargetRefused, match="private, loopback or link-local"):
        validate_target_url(url, allow_private=False)


def test_private_targets_are_accepted_when_the_setting_allows_them(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = True

    assert validate_target_url("http://127.0.0.1:8000/hook") == "http://127.0.0.1:8000/hook"


def test_a_public_address_is_accepted_with_the_setting_off(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False

    assert validate_target_url("https://93.184.215.14/hook") == "https://93.184.215.14/hook"


def test_an_unresolvable_host_is_refused(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False

    with pytest.raises(TargetRefused, match="cannot resolve"):
        validate_target_url("https://no-such-host.invalid/hook")


@pytest.mark.django_db
def test_a_subscription_with_a_refused_url_or_unknown_events_does_not_validate(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False
    subscription = Subscription(
        name="x", url="http://127.0.0.1/hook", event_types=["request_completed", "request_exploded"]
    )

    with pytest.raises(ValidationError) as caught:
        subscription.full_clean()

    assert set(caught.value.message_dict) == {"url", "event_types"}
    assert "request_exploded" in caught.value.message_dict["event_types"][0]


@pytest.mark.django_db
def test_a_subscription_needs_at_least_one_event_type(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = True
    subscription = Subscription(name="x", url="http://127.0.0.1/hook", event_types=[])

    with pytest.raises(ValidationError) as caught:
        subscription.full_clean()

    assert set(caught.value.message_dict) == {"event_types"}


@pytest.mark.django_db
def test_a_new_subscription_gets_a_strong_random_secret():
    first = Subscription.objects.create(name="a", url="https://h.example/a", event_types=["x"])
    second = Subscription.objects.create(name="b", url="https://h.example/b", event_types=["x"])

    assert len(first.secret) >= 40
    assert first.secret != second.secret
