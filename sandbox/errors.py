"""What a simulated venue answers when it does not simply succeed."""


class VenueError(Exception):
    def __init__(self, message: str, **evidence) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence


class VenueRejected(VenueError):
    """The venue refused and will keep refusing."""


class VenueTimeout(VenueError):
    """No answer in time: the request may or may not have been carried out."""


class VenueDisabled(VenueError):
    """The sandbox is switched off (settings.QTG_SANDBOX_ENABLED)."""
