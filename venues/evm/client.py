"""Talking to an EVM node: one web3 client per chain, and what its errors mean.

A node's error messages are not standardised; the phrases below are geth's, anvil's and
Erigon's for the same conditions. Whatever they say, "nonce too low" and "already known" are
never read as a failure on their own: the caller looks the transaction up by hash first.
"""

import threading
from typing import Any

from venues.ethlib import Web3
from venues.evm.config import EvmChain

ALREADY_KNOWN = (
    "already known",
    "already imported",
    "known transaction",
    "alreadyknown",
    "existing tx with same hash",  # Erigon
)
NONCE_USED = ("nonce too low", "nonce is too low", "oldnonce")
# A nonce above the sender's next one, refused by nodes that keep no future queue (Hardhat's
# automine): the gap below it is being filled; nothing to page about.
NONCE_AHEAD = ("nonce too high", "nonce is too high", "future nonce", "nonce gap")
UNDERPRICED = ("underpriced", "less than block base fee", "fee cap less than", "too low to")

_clients: dict[tuple[str, float, int], Web3] = {}
_lock = threading.Lock()


def web3_for(chain: EvmChain) -> Web3:
    """The process's web3 client for ``chain``'s primary endpoint (its URL read from the
    named env variable)."""
    return _client_for(chain.rpc_url, chain.rpc_timeout_seconds)


def web3_endpoints(chain: EvmChain) -> list[tuple[str, Web3]]:
    """Every endpoint of ``chain`` as (its URL variable, its client), the primary first."""
    from venues import conf

    return [
        (env, _client_for(conf.rpc_url(chain.name, env), chain.rpc_timeout_seconds))
        for env in chain.endpoint_envs
    ]


def _client_for(url: str, timeout: float) -> Web3:
    # One client per thread: its HTTP session is the thread's own (requests does not promise
    # a session is safe to share), as web3's own per-thread sessions were.
    key = (url, timeout, threading.get_ident())
    with _lock:
        client = _clients.get(key)
        if client is None:
            # No retries inside web3: a timeout is reported at once and the worker decides
            # (a read is asked again later, a send is looked up by hash). The chain id an
            # endpoint serves is read once per client, so once per worker process (web3 asks
            # it before every gas estimate and call, we before every new nonce): a
            # successful answer is kept, an error is not. Nothing else is cached by web3.
            provider = Web3.HTTPProvider(
                key[0],
                request_kwargs={"timeout": timeout},
                session=_session(url),
                exception_retry_configuration=None,
                cache_allowed_requests=True,
                cacheable_requests={"eth_chainId"},
                request_cache_validation_threshold=None,
            )
            client = Web3(provider)
            _clients[key] = client
    return client


def _session(url: str) -> Any:
    """An HTTP session for ``url`` with what the environment says about it (proxies, CA
    bundle, .netrc credentials) read once, when the client is made: requests otherwise reads
    the whole environment again for every request (a third of the CPU of a call)."""
    import requests

    session = requests.Session()
    # requests' own reading of the environment for this URL (proxies, CA bundle), made once.
    found = session.merge_environment_settings(url, {}, None, None, None)
    session.trust_env = False
    session.proxies.update(found["proxies"])
    session.verify = found["verify"]
    credentials = requests.utils.get_netrc_auth(url)
    if credentials:
        session.auth = credentials
    return session


def is_network_error(exc: BaseException) -> bool:
    """The node did not answer (timeout, refused connection, a proxy's 5xx)."""
    import requests

    return isinstance(exc, requests.exceptions.RequestException | TimeoutError | OSError)


def rpc_message(exc: BaseException) -> str:
    """The node's error message, lower case ('' if ``exc`` is not an RPC error answer)."""
    from web3.exceptions import Web3RPCError

    if not isinstance(exc, Web3RPCError):
        return ""
    response = getattr(exc, "rpc_response", None) or {}
    error = response.get("error") if isinstance(response, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"]).lower()
    return str(getattr(exc, "message", "") or exc).lower()


def says(message: str, phrases: tuple[str, ...]) -> bool:
    return any(phrase in message for phrase in phrases)


def receipt_of(w3: Web3, tx_hash: str) -> Any | None:
    from web3.exceptions import TransactionNotFound

    try:
        return w3.eth.get_transaction_receipt(tx_hash)
    except TransactionNotFound:
        return None


def transaction_of(w3: Web3, tx_hash: str) -> Any | None:
    from web3.exceptions import TransactionNotFound

    try:
        return w3.eth.get_transaction(tx_hash)
    except TransactionNotFound:
        return None
