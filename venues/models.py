"""The venues app's models, defined beside each adapter."""

from venues.cex.models import CexRateBucket, CexWithdrawal

__all__ = ["CexRateBucket", "CexWithdrawal"]
