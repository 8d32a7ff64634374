"""A local exchange that speaks the subset of Binance's and Upbit's real REST APIs that ccxt
calls for balances, withdrawals and deposits, and misbehaves on request. See README.md."""

from .harness import ControlError, LocalExchange, local_urls, spot_error_tables

__all__ = ["ControlError", "LocalExchange", "local_urls", "spot_error_tables"]
