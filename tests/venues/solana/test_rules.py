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
from venues.solana.endpoints import judge
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
    contradiction=st.one_of(st.none(), st.just("QTG_B did not answer")),
)
def test_a_transaction_not_in_any_block_is_expired_only_when_height_node_and_status_view_agree(
    final_height, last_valid, valid, status_slot, final_slot, wanted, contradiction
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
        contradiction=contradiction,
    )

    expired = fate(seen, wanted=wanted) == Fate.EXPIRED

    # The null status must be answered at (or past) the finalized slot where the height was
    # read: a lagging status view proves nothing; nor does it while the chain's other
    # endpoints do not all agree.
    covered = status_slot is not None and final_slot is not None and status_slot >= final_slot
    agreed = contradiction is None
    assert expired == (final_height > last_valid and not valid and covered and agreed)


def _answer(endpoint, slot, status=None, context=None, error=None):
    if error:
        return {"endpoint": endpoint, "error": error}
    answer = {"endpoint": endpoint, "slot": slot, "status": status}
    answer["status_context_slot"] = slot if context is None else context
    return answer


LANDED = {"slot": 990, "err": None, "confirmations": 3}


@pytest.mark.parametrize(
    ("answers", "landing", "contradiction"),
    [
        ([_answer("A", 1000), _answer("B", 1001)], None, None),
        ([_answer("A", 1000), _answer("B", 1001, LANDED)], 1, None),
        ([_answer("A", 1000), _answer("B", 0, error="Node is unhealthy")], None, "B did not"),
        ([_answer("A", 1000), _answer("B", 700)], None, None),  # B lags: ignored
        ([_answer("A", 700), _answer("B", 1000)], None, "primary endpoint is lagging"),
        ([_answer("A", 1000), _answer("B", 1000, context=900)], None, "short of the decisive"),
        ([_answer("A", 1000), _answer("B", 700, LANDED)], 1, None),  # lagging, still landed
    ],
    ids=["agree", "landed-elsewhere", "errs", "lags", "primary-lags", "short", "lag-sees-it"],
)
def test_every_endpoint_not_lagging_must_agree_it_never_landed(answers, landing, contradiction):
    found, why = judge(answers, decisive_slot=950, max_lag=50)
    assert found == landing
    if contradiction is None:
        assert why is None
    else:
        assert contradiction in why


answers_st = st.lists(
    st.fixed_dictionaries(
        {
            "slot": st.integers(0, 2000),
            "context_back": st.integers(0, 100),
            "landed": st.booleans(),
            "error": st.booleans(),
        }
    ),
    min_size=1,
    max_size=5,
)


@given(answers=answers_st, decisive=st.integers(0, 2000), max_lag=st.integers(0, 200))
def test_a_landing_at_any_endpoint_wins_and_an_error_always_blocks_absence(
    answers, decisive, max_lag
):
    built = [
        _answer(
            f"E{i}",
            a["slot"],
            LANDED if a["landed"] else None,
            a["slot"] - a["context_back"],
            "down" if a["error"] else None,
        )
        for i, a in enumerate(answers)
    ]
    landing, why = judge(built, decisive_slot=decisive, max_lag=max_lag)
    shown = [i for i, a in enumerate(answers) if a["landed"] and not a["error"]]
    # Never "no landing" while any endpoint that answers shows one.
    assert landing == (shown[0] if shown else None)
    # Absence is agreed only when no endpoint errs (or every erring one is outweighed by a
    # landing, which is no absence) and every endpoint not lagging covers the decisive slot.
    if landing is None and any(a["error"] for a in answers):
        assert why is not None
    if why is None and landing is None:
        for answer in built:
            assert answer["lagging"] or answer["status_context_slot"] >= decisive


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
