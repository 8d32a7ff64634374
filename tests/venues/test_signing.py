"""The built-in signer: keys from an env variable or an encrypted keystore, never shown."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from eth_account import Account

from venues.signing import (
    LocalKeySigner,
    Signer,
    forget_signers,
    register_signer_backend,
    signer_for,
)

KEY = "0x" + "11" * 32
ADDRESS = Account.from_key(KEY).address
TX = {
    "chainId": 31337,
    "nonce": 0,
    "to": ADDRESS,
    "value": 1,
    "gas": 21000,
    "maxFeePerGas": 2 * 10**9,
    "maxPriorityFeePerGas": 10**9,
    "type": 2,
}


@pytest.fixture(autouse=True)
def _fresh():
    forget_signers()
    yield
    forget_signers()


def test_a_key_from_an_env_variable_signs_for_its_address_and_is_never_shown(monkeypatch):
    monkeypatch.setenv("QTG_TEST_KEY", KEY)

    signer = signer_for({"env": "QTG_TEST_KEY"}, what="account t")
    signed = signer.sign_transaction("devchain", TX)

    assert signer.address() == ADDRESS
    assert Account.recover_transaction(signed.raw) == ADDRESS
    assert KEY[2:] not in repr(signer) and KEY[2:] not in str(vars(signer))


def test_a_keystore_is_decrypted_with_the_password_from_the_environment(tmp_path, monkeypatch):
    keystore = tmp_path / "key.json"
    keystore.write_text(json.dumps(Account.encrypt(KEY, "s3cret", iterations=2)))
    monkeypatch.setenv("QTG_TEST_KEY_PASSWORD", "s3cret")

    signer = signer_for(
        {"keystore": str(keystore), "password_env": "QTG_TEST_KEY_PASSWORD"}, what="account t"
    )

    assert signer.address() == ADDRESS


def test_a_wrong_keystore_password_is_a_configuration_error_without_the_secret(
    tmp_path, monkeypatch
):
    keystore = tmp_path / "key.json"
    keystore.write_text(json.dumps(Account.encrypt(KEY, "s3cret", iterations=2)))
    monkeypatch.setenv("QTG_TEST_KEY_PASSWORD", "wrong-one")

    with pytest.raises(ImproperlyConfigured) as caught:
        signer_for({"keystore": str(keystore), "password_env": "QTG_TEST_KEY_PASSWORD"}, what="t")

    assert "wrong password" in str(caught.value)
    assert "wrong-one" not in str(caught.value)


def test_a_missing_key_variable_names_the_variable(monkeypatch):
    monkeypatch.delenv("QTG_TEST_ABSENT_KEY", raising=False)

    with pytest.raises(ImproperlyConfigured, match="QTG_TEST_ABSENT_KEY is empty"):
        signer_for({"env": "QTG_TEST_ABSENT_KEY"}, what="account t")


def test_a_registered_backend_serves_accounts_that_name_it():
    class Remote(Signer):
        """What a KMS client looks like to the executors: an address and a signature."""

        def __init__(self, key_id):
            self.key_id = key_id
            self._inner = LocalKeySigner(KEY)

        def address(self):
            return self._inner.address()

        def sign_transaction(self, chain, tx):
            return self._inner.sign_transaction(chain, tx)

    register_signer_backend("test-kms", lambda key, what: Remote(key["key_id"]))

    signer = signer_for({"backend": "test-kms", "key_id": "k1"}, what="t")

    assert isinstance(signer, Remote) and signer.key_id == "k1"
    assert Account.recover_transaction(signer.sign_transaction("devchain", TX).raw) == ADDRESS
