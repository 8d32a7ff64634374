"""Build and sign a transfer, and the signed payload that is made durable before it is sent.

A transfer of SOL is one System Program ``transfer``. A transfer of an SPL token is an
idempotent create of the recipient's associated token account (paid by the sender; a no-op
when it exists) and a ``transfer_checked``, which makes the token program itself refuse an
amount read with the wrong decimals or the wrong mint.

The payload records what recovery needs without asking anyone: the signature (the
transaction's identity on chain), the raw bytes (re-sent as they are, never re-signed), the
blockhash and its last valid block height (when the transaction can be proved dead).
"""

import base64
import json
from dataclasses import asdict, dataclass

from solders.hash import Hash
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    create_idempotent_associated_token_account,
    get_associated_token_address,
    transfer_checked,
)
from spl.token.models import TransferCheckedParams

from .config import Token


@dataclass(frozen=True)
class SignedTransfer:
    chain_transaction_id: int
    signature: str
    raw_base64: str
    blockhash: str
    last_valid_block_height: int

    @property
    def raw(self) -> bytes:
        return base64.b64decode(self.raw_base64)

    def to_payload(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_payload(cls, payload: str) -> "SignedTransfer":
        return cls(**json.loads(payload))


def transfer_instructions(*, token: Token, sender: Pubkey, recipient: Pubkey, units: int) -> list:
    if token.native:
        return [transfer(TransferParams(from_pubkey=sender, to_pubkey=recipient, lamports=units))]
    source = get_associated_token_address(sender, token.mint)
    destination = get_associated_token_address(recipient, token.mint)
    return [
        create_idempotent_associated_token_account(sender, recipient, token.mint),
        transfer_checked(
            TransferCheckedParams(
                program_id=TOKEN_PROGRAM_ID,
                source=source,
                mint=token.mint,
                dest=destination,
                owner=sender,
                amount=units,
                decimals=token.decimals,
            )
        ),
    ]


def transfer_message(
    *, token: Token, sender: Pubkey, recipient: Pubkey, units: int, blockhash: Hash
) -> Message:
    """The unsigned message: what the signer signs, with the blockhash that dates it."""
    instructions = transfer_instructions(
        token=token, sender=sender, recipient=recipient, units=units
    )
    return Message.new_with_blockhash(instructions, sender, blockhash)


def message_base64(message: Message) -> str:
    return base64.b64encode(bytes(message)).decode()
