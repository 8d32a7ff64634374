"""The built-in signer's keypair. The reviewed config names where the secret is (an env var or
a file, ``{env: NAME}`` / ``{file: PATH}``); the key itself is never in the database, the
config, a log line or an error message.

Accepted forms: the JSON array of 64 numbers that ``solana-keygen`` writes, or the base58
string of the same 64 bytes that wallets export.
"""

import json

from solders.keypair import Keypair


class KeypairError(ValueError):
    """The secret is not a Solana keypair (the message never contains the secret)."""


def keypair_from_secret(secret: str, *, what: str) -> Keypair:
    text = secret.strip()
    try:
        if text.startswith("["):
            numbers = json.loads(text)
            if not isinstance(numbers, list) or len(numbers) != 64:
                raise ValueError
            return Keypair.from_bytes(bytes(numbers))
        return Keypair.from_base58_string(text)
    except (ValueError, TypeError):
        raise KeypairError(f"{what}: not a Solana keypair (64-byte JSON array or base58)") from None
