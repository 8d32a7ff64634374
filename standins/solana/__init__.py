"""A local Solana JSON-RPC node over LiteSVM (from solders): slots on a clock, commitment
levels, a blockhash validity window, SPL tokens, and faults on request. See README.md."""

from .harness import ControlError, LocalSolana
from .ledger import Settings

__all__ = ["ControlError", "LocalSolana", "Settings"]
