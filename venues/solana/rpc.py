"""A synchronous face over solana-py's RPC client, for the workers' synchronous executors.

solana-py 0.41 ships only an async client; each call here runs it on a short-lived event loop
(``asyncio.run``), which costs a connection per call and keeps executors plain functions.
Errors come back in three kinds the executors can act on:

- ``RpcUnavailable``: the node did not answer (refused, timed out, broken). Whether a
  ``sendTransaction`` that timed out was taken is unknown: the signature tells later.
  (solana-py itself sends once more after a transport error: harmless, the same bytes have
  one signature and land at most once.)
- ``BlockhashNotFound``: preflight refused the blockhash (unknown to the node at the
  preflight commitment, or expired): that transaction can never land through this node.
- ``TransactionRefused``: preflight refused the transaction itself (insufficient funds, a
  failing instruction, already processed); ``err`` is the node's TransactionError.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.core import RPCException
from solana.rpc.jsonrpc import JsonRpcRequest
from solana.rpc.models import TxOpts
from solders.hash import Hash
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction_status import TransactionErrorFieldless, TransactionStatus

T = TypeVar("T")


class RpcUnavailable(Exception):
    """The node did not answer."""


class BlockhashNotFound(Exception):
    """Preflight did not know the transaction's blockhash (or it has expired)."""


class TransactionRefused(Exception):
    """Preflight refused the transaction; ``err`` is the node's TransactionError."""

    def __init__(self, message: str, err: Any) -> None:
        super().__init__(message)
        self.err = err


def _preflight_error(exc: RPCException) -> Exception:
    """The typed error for a refused sendTransaction (the node's message kept)."""
    parsed = exc.args[0] if exc.args else None
    data = getattr(parsed, "data", None)
    err = getattr(data, "err", None)
    message = getattr(parsed, "message", str(exc))
    if err == TransactionErrorFieldless.BlockhashNotFound or "Blockhash not found" in message:
        return BlockhashNotFound(message)
    return TransactionRefused(message, err)


class SolanaRpcClient:
    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout

    def _run(self, call: Callable[[AsyncClient], Awaitable[T]]) -> T:
        async def run() -> T:
            async with AsyncClient(self.url, timeout=self.timeout) as client:
                return await call(client)

        try:
            return asyncio.run(run())
        except SolanaRpcException as exc:
            raise RpcUnavailable(f"solana rpc {self.url}: {exc.__cause__ or exc}") from exc

    def latest_blockhash(self, commitment: str) -> tuple[Hash, int]:
        """(blockhash, last valid block height) as of ``commitment``."""
        value = self._run(lambda c: c.get_latest_blockhash(commitment)).value
        return value.blockhash, value.last_valid_block_height

    def send(self, raw: bytes, *, preflight_commitment: str) -> str:
        """Send signed bytes; returns the signature the node acknowledged."""
        opts = TxOpts(preflight_commitment=preflight_commitment)
        try:
            return str(self._run(lambda c: c.send_raw_transaction(raw, opts)).value)
        except RPCException as exc:
            raise _preflight_error(exc) from exc

    def status(self, signature: str) -> TransactionStatus | None:
        """The signature's status (history searched), or None when no block has it."""
        return self.status_at(signature)[0]

    def status_at(self, signature: str) -> tuple[TransactionStatus | None, int]:
        """The signature's status (history searched) and the context slot of the answer: a
        null status says only that no block up to that slot has it."""
        sig = Signature.from_string(signature)
        answer = self._run(lambda c: c.get_signature_statuses([sig], True))
        return answer.value[0], answer.context.slot

    def slot(self, commitment: str) -> int:
        return self._run(lambda c: c.get_slot(commitment)).value

    def fee(self, signature: str) -> int | None:
        """Lamports the transaction paid, once it is confirmed (None before)."""
        sig = Signature.from_string(signature)
        found = self._run(
            lambda c: c.get_transaction(
                sig, "base64", commitment="confirmed", max_supported_transaction_version=0
            )
        ).value
        meta = found.transaction.meta if found is not None else None
        return None if meta is None else meta.fee

    def block_height(self, commitment: str) -> int:
        return self._run(lambda c: c.get_block_height(commitment)).value

    def blockhash_valid(self, blockhash: str, commitment: str) -> bool:
        request = JsonRpcRequest(
            method="isBlockhashValid", params=[blockhash, {"commitment": commitment}]
        )
        return bool(self._run(lambda c: c.send_rpc_request(request, dict))["value"])

    def mint_decimals(self, mint: Pubkey, commitment: str) -> int | None:
        """The ``decimals`` of an SPL mint account (byte 44 of the Mint layout: a COption
        authority of 36 bytes, the u64 supply, then the u8 decimals), None if no such account."""
        value = self._run(lambda c: c.get_account_info(mint, commitment)).value
        if value is None or len(bytes(value.data)) < 45:
            return None
        return bytes(value.data)[44]

    def balance(self, address: Pubkey, commitment: str) -> int:
        return self._run(lambda c: c.get_balance(address, commitment)).value

    def token_balance(self, token_account: Pubkey, commitment: str) -> int | None:
        """Base units held by a token account, None when it does not exist."""
        try:
            value = self._run(lambda c: c.get_token_account_balance(token_account, commitment))
        except RPCException:
            return None
        return int(value.value.amount)
