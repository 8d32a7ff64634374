"""The venues app's frame: which implementation serves a name, which venues a movement may
name, and where the reviewed configuration is read from."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from movements.executors.registry import ExecutorRegistry
from qtg.core.venues import canonical_venue, is_known_venue, provide_venues
from venues import conf


class Sandboxed:
    pass


class Real:
    pass


def registry_with_both() -> ExecutorRegistry:
    registry = ExecutorRegistry()
    registry._loaded = True
    registry.register("cex_withdraw", provider="sandbox")(Sandboxed)
    registry.register("cex_withdraw", provider="venues")(Real)
    return registry


def test_qtg_venues_decides_between_the_sandbox_and_the_real_venues(settings):
    registry = registry_with_both()

    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "sandbox"
    assert isinstance(registry.get("cex_withdraw"), Sandboxed)
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    assert isinstance(registry.get("cex_withdraw"), Real)
    assert registry.problems() == []


def test_qtg_executors_still_decides_a_name_it_lists(settings):
    registry = registry_with_both()
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    settings.QTG_EXECUTORS = {"cex_withdraw": "sandbox"}

    assert isinstance(registry.get("cex_withdraw"), Sandboxed)


def test_without_a_default_two_providers_are_an_error_not_a_guess(settings):
    registry = registry_with_both()
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = ""

    with pytest.raises(ImproperlyConfigured, match="choose one in QTG_EXECUTORS"):
        registry.get("cex_withdraw")
    assert registry.problems()


def test_chain_addresses_are_venues_and_keep_the_spelling_their_chain_compares():
    evm = "0x52908400098527886E0F7030069857D2E4169EE7"
    solana = "7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV"

    assert canonical_venue(evm) == evm.lower()
    assert canonical_venue(f" {solana} ") == solana
    assert is_known_venue(evm) and is_known_venue(solana)
    assert not is_known_venue("0x1234")  # too short for an address, and not a listed venue


def test_configured_accounts_become_known_venues():
    assert not is_known_venue("Treasury-Hot-Test")

    provide_venues(["Treasury-Hot-Test"])

    assert is_known_venue("treasury-hot-test")


def test_configuration_accounts_and_secrets_come_from_the_named_places(
    tmp_path, settings, monkeypatch
):
    path = tmp_path / "chains.yaml"
    path.write_text(
        "chains:\n  devchain:\n    kind: evm\n    accounts:\n"
        "      hot-wallet: {key: {env: QTG_TEST_KEY}}\n"
    )
    settings.QTG_CHAINS_CONFIG = str(path)
    monkeypatch.setenv("QTG_TEST_KEY", "s3cret")
    (tmp_path / "key").write_text("from-file\n")

    assert "hot-wallet" in conf.account_names()
    assert conf.secret({"env": "QTG_TEST_KEY"}, what="hot-wallet") == "s3cret"
    assert conf.secret({"file": str(tmp_path / "key")}, what="hot-wallet") == "from-file"
    monkeypatch.delenv("QTG_TEST_KEY")
    with pytest.raises(ImproperlyConfigured, match="QTG_TEST_KEY is empty"):
        conf.secret({"env": "QTG_TEST_KEY"}, what="hot-wallet")


def test_the_declared_executors_are_exactly_those_each_module_registers():
    # Declared at start-up without importing the adapters (web3, ccxt, solana load on first
    # use): the declaration may not drift from what each module registers.
    from importlib import import_module

    from movements.executors.registry import registry
    from venues.apps import EXECUTORS, PROVIDER

    for module, names in EXECUTORS.items():
        import_module(module)
        registered = {
            name
            for name, providers in registry._providers.items()
            if getattr(providers.get(PROVIDER), "__module__", "") == module
        }
        assert registered == set(names), module


@pytest.mark.parametrize(
    "start",
    [
        pytest.param("", id="management command"),
        # what a Celery worker loads before it is ready (every app's tasks) and the web's URLs
        pytest.param(
            "from qtg.celery import app; app.loader.import_default_modules(); import qtg.urls; ",
            id="worker and web",
        ),
    ],
)
def test_starting_django_imports_no_venue_client_library(start):
    import subprocess
    import sys

    code = (
        f"import django, sys; django.setup(); {start}"
        "print(sorted(m for m in ('web3', 'ccxt', 'solana', 'eth_account') if m in sys.modules))"
    )
    env = {**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "qtg.settings"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
