"""The integration API (DRF): token-authenticated endpoints under /api/v1/."""
