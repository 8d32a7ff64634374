"""Target URL validation: http(s) only, and no private, loopback or link-local addresses
unless QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS is on."""

import socket
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import ValidationError

from callbacks import targets
from callbacks.models import Delivery, DeliveryStatus, Subscription
from callbacks.targets import TargetRefused, pin_target_url, validate_target_url
from movements.services import movement_approve
from qtg.core.actors import Actor


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


def _resolves_to(monkeypatch, address: str) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    def fake_getaddrinfo(host, port, *args, **kwargs):
        return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(targets.socket, "getaddrinfo", fake_getaddrinfo)


def test_a_name_is_pinned_to_the_checked_address_with_host_and_sni_kept(monkeypatch, settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False
    _resolves_to(monkeypatch, "93.184.215.14")

    target = pin_target_url("https://hooks.example.test:8443/qtg?x=1")

    assert target.url == "https://93.184.215.14:8443/qtg?x=1"
    assert target.headers == {"Host": "hooks.example.test:8443"}
    assert target.extensions == {"sni_hostname": "hooks.example.test"}


def test_an_ipv6_address_is_pinned_in_brackets(monkeypatch, settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False
    _resolves_to(monkeypatch, "2606:2800:21f:cb07:6820:80da:af6b:8b2c")

    target = pin_target_url("http://hooks.example.test/qtg")

    assert target.url == "http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/qtg"
    assert (target.headers, target.extensions) == ({"Host": "hooks.example.test"}, {})


def test_nothing_is_pinned_when_private_targets_are_allowed(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = True

    target = pin_target_url("http://hooks.example.test/qtg")

    assert (target.url, target.headers, target.extensions) == (
        "http://hooks.example.test/qtg",
        {},
        {},
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("eager_tasks")
def test_a_host_that_now_resolves_to_a_private_address_gets_nothing(
    monkeypatch, settings, subscribe, make_movement, django_capture_on_commit_callbacks
):
    subscribe("http://hooks.example.test/qtg", "request_approved")
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False
    _resolves_to(monkeypatch, "10.0.0.7")
    request = make_movement()

    with django_capture_on_commit_callbacks(execute=True):
        movement_approve(request=request, actor=Actor.system("tests"))

    delivery = Delivery.objects.get()
    assert delivery.attempts == 1
    assert "resolves to 10.0.0.7" in delivery.last_error


@pytest.mark.django_db
@pytest.mark.usefixtures("eager_tasks")
def test_the_pinned_request_reaches_the_checked_address_with_the_original_host(
    monkeypatch, settings, receiver, subscribe, make_movement, django_capture_on_commit_callbacks
):
    port = urlsplit(receiver.url).port
    subscribe(f"http://hooks.example.test:{port}/hooks/qtg", "request_approved")
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False
    _resolves_to(monkeypatch, "127.0.0.1")
    # Treat the test receiver's loopback address as public, so the pinned path is exercised.
    monkeypatch.setattr(targets, "_is_private", lambda address: False)
    request = make_movement()

    with django_capture_on_commit_callbacks(execute=True):
        movement_approve(request=request, actor=Actor.system("tests"))

    [got] = receiver.received
    assert got.headers["Host"] == f"hooks.example.test:{port}"
    assert Delivery.objects.get().status == DeliveryStatus.DELIVERED


@pytest.mark.parametrize(
    "url",
    [
        "http://100.100.100.200/latest/meta-data",  # shared address space (cloud metadata)
        "http://100.64.0.1/hook",
        "http://192.0.0.8/hook",  # IETF protocol assignments
        "http://198.18.0.1/hook",  # benchmarking
        "http://[2002:7f00:1::]/hook",  # 6to4 wrapping 127.0.0.1
        "http://[2002:a9fe:a9fe::]/hook",  # 6to4 wrapping 169.254.169.254
        "http://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 wrapping 169.254.169.254
        "http://240.0.0.1/hook",
    ],
)
def test_every_address_that_is_not_globally_routable_is_refused(url):
    with pytest.raises(TargetRefused, match="private, loopback or link-local"):
        validate_target_url(url, allow_private=False)


def test_a_name_with_one_private_address_among_public_ones_is_refused(monkeypatch, settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False

    def fake_getaddrinfo(host, port, *args, **kwargs):
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("100.100.100.200", port)),
        ]

    monkeypatch.setattr(targets.socket, "getaddrinfo", fake_getaddrinfo)

    with pytest.raises(TargetRefused, match=r"100\.100\.100\.200"):
        pin_target_url("https://hooks.example.test/qtg")
