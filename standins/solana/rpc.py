"""Solana's JSON-RPC methods over the ledger, answered in the real wire format.

Results are built from solders' own response types and serialised with their `to_json`, so
whatever solana-py parses from a real node it parses from here. Parameters follow the real API:
positional, with an optional trailing config object (`commitment`, `encoding`, ...).
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal

from solders.account import Account
from solders.account_decoder import UiTokenAmount
from solders.hash import Hash
from solders.pubkey import Pubkey
from solders.rpc.responses import (
    GetAccountInfoResp,
    GetBalanceResp,
    GetLatestBlockhashResp,
    GetSignatureStatusesResp,
    GetTokenAccountBalanceResp,
    GetTransactionResp,
    IsBlockhashValidResp,
    RpcBlockhash,
    RpcResponseContext,
    RpcSimulateTransactionResult,
)
from solders.signature import Signature
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata
from solders.transaction_status import (
    EncodedConfirmedTransactionWithStatusMeta,
    EncodedTransactionWithStatusMeta,
    TransactionConfirmationStatus,
    TransactionErrorFieldless,
    TransactionStatus,
    UiTransactionStatusMeta,
    UiTransactionTokenBalance,
)
from spl.token.constants import TOKEN_PROGRAM_ID

from .ledger import COMMITMENTS, Ledger, LedgerError, TokenBalance

# JSON-RPC and Solana error codes, as a real node sends them.
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
PREFLIGHT_FAILURE = -32002
SIGNATURE_VERIFICATION_FAILURE = -32003

CONFIRMATION_STATUS = {
    "processed": TransactionConfirmationStatus.Processed,
    "confirmed": TransactionConfirmationStatus.Confirmed,
    "finalized": TransactionConfirmationStatus.Finalized,
}


class RpcError(Exception):
    """An error answer: {"code", "message", "data"?}."""

    def __init__(self, code: int, message: str, data: object | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def as_json(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def _result(response) -> object:
    """The `result` member of a solders response object."""
    return json.loads(response.to_json())["result"]


def _config(params: list, index: int) -> dict:
    if len(params) > index and params[index] is not None:
        if not isinstance(params[index], dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: config must be an object")
        return params[index]
    return {}


def _arg(params: list, index: int, name: str):
    if len(params) <= index:
        raise RpcError(INVALID_PARAMS, f"Invalid params: missing {name}")
    return params[index]


def _pubkey(value) -> Pubkey:
    try:
        return Pubkey.from_string(value)
    except (TypeError, ValueError):
        raise RpcError(INVALID_PARAMS, f"Invalid param: {value!r} is not a public key") from None


def _commitment(config: dict) -> str:
    commitment = config.get("commitment") or "finalized"
    if commitment not in COMMITMENTS:
        raise RpcError(INVALID_PARAMS, f"Invalid commitment {commitment!r}")
    return commitment


def _ui_amount(amount: int, decimals: int) -> UiTokenAmount:
    whole = Decimal(amount).scaleb(-decimals)
    text = format(whole.normalize(), "f") if amount else "0"
    return UiTokenAmount(float(whole), decimals, str(amount), text)


def _token_balance(item: TokenBalance) -> UiTransactionTokenBalance:
    return UiTransactionTokenBalance(
        item.account_index,
        item.mint,
        _ui_amount(item.amount, item.decimals),
        item.owner,
        TOKEN_PROGRAM_ID,
    )


class SolanaRpc:
    """Dispatches one JSON-RPC call to the method of the same name."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.methods = {
            "getLatestBlockhash": self.get_latest_blockhash,
            "isBlockhashValid": self.is_blockhash_valid,
            "sendTransaction": self.send_transaction,
            "getSignatureStatuses": self.get_signature_statuses,
            "getTransaction": self.get_transaction,
            "getBalance": self.get_balance,
            "getAccountInfo": self.get_account_info,
            "getTokenAccountBalance": self.get_token_account_balance,
            "getSlot": self.get_slot,
            "getBlockHeight": self.get_block_height,
            "getMinimumBalanceForRentExemption": self.get_minimum_balance,
            "requestAirdrop": self.request_airdrop,
            "getHealth": lambda params: "ok",
            "getVersion": lambda params: {"solana-core": "2.2.0-qtg-standin", "feature-set": 0},
        }

    def call(self, method: str, params: list) -> object:
        handler = self.methods.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, "Method not found")
        if not isinstance(params, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: expected an array")
        try:
            return handler(params)
        except LedgerError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None

    def _context(self, commitment: str = "processed") -> RpcResponseContext:
        return RpcResponseContext(self.ledger.slot_at(commitment))

    # --- blockhashes -------------------------------------------------------------------------

    def get_latest_blockhash(self, params: list) -> object:
        blockhash, last_valid, slot = self.ledger.latest_blockhash(_commitment(_config(params, 0)))
        value = RpcBlockhash(Hash.from_string(blockhash), last_valid)
        return _result(GetLatestBlockhashResp(value, RpcResponseContext(slot)))

    def is_blockhash_valid(self, params: list) -> object:
        blockhash = _arg(params, 0, "blockhash")
        commitment = _commitment(_config(params, 1))
        height = self.ledger.height_at(commitment)
        valid = self.ledger.blockhash_usable(blockhash, height)
        return _result(
            IsBlockhashValidResp(valid, RpcResponseContext(self.ledger.slot_at(commitment)))
        )

    # --- transactions ------------------------------------------------------------------------

    def send_transaction(self, params: list) -> object:
        config = _config(params, 1)
        encoding = config.get("encoding", "base58")
        if encoding != "base64":
            raise RpcError(INVALID_PARAMS, f"unsupported encoding: {encoding} (send base64)")
        try:
            tx = VersionedTransaction.from_bytes(base64.b64decode(_arg(params, 0, "transaction")))
        except (ValueError, TypeError):
            raise RpcError(INVALID_PARAMS, "failed to deserialize transaction") from None
        if not all(tx.verify_with_results()):
            raise RpcError(
                SIGNATURE_VERIFICATION_FAILURE, "Transaction signature verification failure"
            )
        if not config.get("skipPreflight", False):
            self._preflight(tx, _commitment({"commitment": config.get("preflightCommitment")}))
        self.ledger.accept(tx)
        return str(tx.signatures[0])

    def _preflight(self, tx: VersionedTransaction, commitment: str) -> None:
        """What a real node checks before forwarding: a known, unexpired blockhash, not already
        processed, and a simulation that succeeds."""
        signature = str(tx.signatures[0])
        height = self.ledger.height_at(commitment)
        if signature in self.ledger.landed:
            self._refuse(
                TransactionErrorFieldless.AlreadyProcessed,
                "This transaction has already been processed",
            )
        if not self.ledger.blockhash_usable(str(tx.message.recent_blockhash), height):
            self._refuse(TransactionErrorFieldless.BlockhashNotFound, "Blockhash not found")
        simulated = self.ledger.simulate(tx)
        if isinstance(simulated, FailedTransactionMetadata):
            meta = simulated.meta()
            self._refuse(simulated.err(), str(simulated.err()), list(meta.logs()))

    @staticmethod
    def _refuse(err, text: str, logs: list[str] | None = None) -> None:
        data = RpcSimulateTransactionResult(err=err, logs=logs or [], units_consumed=0)
        raise RpcError(
            PREFLIGHT_FAILURE,
            f"Transaction simulation failed: {text}",
            json.loads(data.to_json()),
        )

    def get_signature_statuses(self, params: list) -> object:
        signatures = _arg(params, 0, "signatures")
        if not isinstance(signatures, list) or len(signatures) > 256:
            raise RpcError(INVALID_PARAMS, "Invalid params: up to 256 signatures")
        statuses = []
        for signature in signatures:
            found = self.ledger.status(signature)
            if found is None:
                statuses.append(None)
                continue
            landed, level, confirmations = found
            statuses.append(
                TransactionStatus(
                    landed.slot,
                    confirmations,
                    landed.err,
                    landed.err,
                    CONFIRMATION_STATUS[level],
                )
            )
        context = RpcResponseContext(self.ledger.status_view_slot(list(signatures)))
        return _result(GetSignatureStatusesResp(statuses, context))

    def get_transaction(self, params: list) -> object:
        signature = _arg(params, 0, "signature")
        config = _config(params, 1)
        commitment = _commitment(config)
        if commitment == "processed":
            raise RpcError(INVALID_PARAMS, "Method does not support commitment below `confirmed`")
        if config.get("encoding", "json") != "base64":
            raise RpcError(INVALID_PARAMS, "the stand-in answers getTransaction in base64 only")
        try:
            Signature.from_string(signature)
        except ValueError:
            raise RpcError(INVALID_PARAMS, "Invalid param: not a signature") from None
        found = self.ledger.status(signature)
        if found is None or COMMITMENTS.index(found[1]) < COMMITMENTS.index(commitment):
            return None
        landed = found[0]
        meta = UiTransactionStatusMeta(
            landed.err,
            landed.fee,
            landed.pre_balances,
            landed.post_balances,
            inner_instructions=[],
            log_messages=landed.logs,
            pre_token_balances=[_token_balance(b) for b in landed.pre_token_balances],
            post_token_balances=[_token_balance(b) for b in landed.post_token_balances],
            rewards=[],
            compute_units_consumed=landed.compute_units,
        )
        encoded = EncodedTransactionWithStatusMeta(
            landed.transaction, meta, landed.transaction.version()
        )
        value = EncodedConfirmedTransactionWithStatusMeta(landed.slot, encoded, landed.block_time)
        return _result(GetTransactionResp(value))

    # --- accounts ----------------------------------------------------------------------------

    def get_balance(self, params: list) -> object:
        pubkey = _pubkey(_arg(params, 0, "pubkey"))
        return _result(GetBalanceResp(self.ledger.balance(pubkey), self._context()))

    def get_account_info(self, params: list) -> object:
        pubkey = _pubkey(_arg(params, 0, "pubkey"))
        config = _config(params, 1)
        if config.get("encoding", "base64") != "base64":
            raise RpcError(INVALID_PARAMS, "the stand-in answers getAccountInfo in base64 only")
        account = self.ledger.account(pubkey)
        value = None
        if account is not None:
            value = Account(
                account.lamports, bytes(account.data), account.owner, account.executable
            )
        return _result(GetAccountInfoResp(value, self._context()))

    def get_token_account_balance(self, params: list) -> object:
        pubkey = _pubkey(_arg(params, 0, "pubkey"))
        token = self.ledger.token_account(pubkey)
        if token is None:
            raise RpcError(INVALID_PARAMS, "Invalid param: could not find account")
        _mint, _owner, amount, decimals = token
        return _result(GetTokenAccountBalanceResp(_ui_amount(amount, decimals), self._context()))

    def get_minimum_balance(self, params: list) -> object:
        size = _arg(params, 0, "data length")
        if not isinstance(size, int) or size < 0:
            raise RpcError(INVALID_PARAMS, "Invalid param: data length")
        return self.ledger.rent_exempt_minimum(size)

    def request_airdrop(self, params: list) -> object:
        pubkey = _pubkey(_arg(params, 0, "pubkey"))
        lamports = _arg(params, 1, "lamports")
        if not isinstance(lamports, int) or lamports <= 0:
            raise RpcError(INVALID_PARAMS, "Invalid param: lamports")
        self.ledger.airdrop(pubkey, lamports)
        return str(Signature.new_unique())

    # --- slots -------------------------------------------------------------------------------

    def get_slot(self, params: list) -> object:
        return self.ledger.slot_at(_commitment(_config(params, 0)))

    def get_block_height(self, params: list) -> object:
        # Skipped slots have no block: the block height is below the slot.
        return self.ledger.height_at(_commitment(_config(params, 0)))
