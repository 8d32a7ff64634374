"""The pure rules of the Solana adapter: when a transaction is provably dead, how amounts
become base units, what the reviewed config accepts, and how keys are read."""

import base64
import json
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import strategies as st
from solders.hash import Hash
from solders.keypair import Keypair

from venues.solana.amounts import AmountError, from_base_units, to_base_units
from venues.solana.config import Token, parse_chain
from venues.solana.fate import COMMITMENTS, Fate, Seen, fate
from venues.solana.keys import KeypairError, keypair_from_secret
from venues.solana.signing import SolanaKeypairSigner
from venues.solana.transactions import message_base64, transfer_message

MINT = "EPjFWDv5Pd6nqTB5vD4L1YB9ySc4kXg7a5YvBG5h7d9Z"
levels = st.sampled_from(COMMITMENTS)


@given(
    final_height=st.integers(0, 10_000),
    last_valid=st.integers(0, 10_000),
    valid=st.booleans(),
    status_slot=st.one_of(st.none(), st.integers(0, 20_000)),
    final_slot=st.one_of(st.none(), st.integers(0, 20_000)),
    wanted=levels,
)
def test_a_transaction_not_in_any_block_is_expired_only_when_height_node_and_status_view_agree(
    final_height, last_valid, valid, status_slot, final_slot, wanted
):
    seen = Seen(
        None,
        None,
        None,
        final_height,
        valid,
        last_valid,
        status_slot=status_slot,
        final_slot=final_slot,
    )

    expired = fate(seen, wanted=wanted) == Fate.EXPIRED

    # The null status must be answered at (or past) the finalized slot where the height was
    # read: a lagging status view proves nothing.
    covered = status_slot is not None and final_slot is not None and status_slot >= final_slot
    assert expired == (final_height > last_valid and not valid and covered)


@pytest.mark.parametrize(
    ("status_slot", "final_slot", "expected"),
    [(None, 500, Fate.PENDING), (499, 500, Fate.PENDING), (500, 500, Fate.EXPIRED)],
    ids=["no-context", "status-view-behind", "status-view-covers"],
)
def test_expiry_needs_a_status_answer_covering_the_decisive_slot(status_slot, final_slot, expected):
    seen = Seen(None, None, None, 200, False, 150, status_slot=status_slot, final_slot=final_slot)
    assert fate(seen, wanted="finalized") == expected


@given(slot=st.integers(0, 10**9), level=levels, wanted=levels, err=st.none() | st.just("E"))
def test_a_transaction_in_a_block_is_never_expired(slot, level, wanted, err):
    seen = Seen(slot, level, err, 10**12, False, 0)

    result = fate(seen, wanted=wanted)

    deep_enough = COMMITMENTS.index(level) >= COMMITMENTS.index(wanted)
    if not deep_enough:
        assert result == Fate.LANDED
    else:
        assert result == (Fate.FAILED if err else Fate.SETTLED)


@given(units=st.integers(1, 2**64 - 1), decimals=st.integers(0, 18))
def test_base_units_round_trip_exactly(units, decimals):
    assert to_base_units(from_base_units(units, decimals), decimals) == units


@pytest.mark.parametrize(
    ("amount", "decimals", "problem"),
    [
        ("1.0000001", 6, "more than 6 decimals"),
        ("0", 9, "not a positive"),
        ("-1", 6, "not a positive"),
        ("18446744073709.551616", 6, "more than a Solana amount"),
    ],
)
def test_amounts_that_cannot_be_moved_exactly_are_refused(amount, decimals, problem):
    with pytest.raises(AmountError, match=problem):
        to_base_units(Decimal(amount), decimals)


def entry(**overrides):
    base = {
        "kind": "solana",
        "rpc_url_env": "X",
        "tokens": {"SOL": {"decimals": 9}, "USDC": {"mint": MINT, "decimals": 6}},
        "accounts": {"t": {"address": str(Keypair().pubkey()), "key": {"env": "K"}}},
    }
    return {**base, **overrides}


def test_the_reviewed_config_gives_commitments_tokens_and_accounts():
    chain = parse_chain("solana", entry(commitment={"landed": "processed"}))

    assert (chain.blockhash_commitment, chain.landed_commitment, chain.final_commitment) == (
        "confirmed",
        "processed",
        "finalized",
    )
    assert chain.token("usdc").decimals == 6
    assert chain.token("SOL").native


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"commitment": {"final": "max"}}, "commitment.final"),
        ({"commitment": {"landed": "finalized", "final": "confirmed"}}, "deeper"),
        ({"tokens": {"SOL": {"decimals": 9, "mint": MINT}}}, "native"),
        ({"tokens": {"USDC": {"decimals": 6}}}, "needs its mint"),
        ({"rpc_url_env": {"env": "X"}}, "rpc_url_env"),
        ({"accounts": {"t": {"address": "nope", "key": {"env": "K"}}}}, "public key"),
    ],
)
def test_a_malformed_entry_is_refused_with_its_reason(overrides, problem):
    with pytest.raises(ImproperlyConfigured, match=problem):
        parse_chain("solana", entry(**overrides))


def test_a_keypair_is_read_from_solana_keygens_json_or_base58():
    keypair = Keypair()

    assert keypair_from_secret(json.dumps(list(bytes(keypair))), what="k") == keypair
    assert keypair_from_secret(str(keypair), what="k") == keypair


def test_a_bad_secret_is_refused_without_repeating_it():
    with pytest.raises(KeypairError) as refused:
        keypair_from_secret("[1, 2, 3, 424242]", what="treasury key")

    assert "424242" not in str(refused.value)
    assert "treasury key" in str(refused.value)


def test_the_signer_signs_only_messages_its_key_pays_for_and_shows_only_its_address():
    keypair, other = Keypair(), Keypair()
    signer = SolanaKeypairSigner(keypair)
    sol = Token("SOL", 9, None)

    def message(payer):
        built = transfer_message(
            token=sol, sender=payer, recipient=Keypair().pubkey(), units=5, blockhash=Hash.default()
        )
        return {"message": message_base64(built)}

    signed = signer.sign_transaction("solana", message(keypair.pubkey()))
    assert base64.b64encode(signed.raw)
    assert repr(signer) == f"<SolanaKeypairSigner {keypair.pubkey()}>"
    with pytest.raises(ValueError, match="fee payer"):
        signer.sign_transaction("solana", message(other.pubkey()))
