"""What every endpoint under ``/api/v1/`` shares, movements' own and those other apps add
(through ``movements.public``): authentication, scopes, throttles, the strict JSON parser,
the contract header, refusing unknown query parameters, and the problem+json error responses
each operation documents. It imports no view and no service."""

from drf_spectacular.utils import OpenApiResponse
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from access.authentication import ApiTokenAuthentication
from access.permissions import TokenScope
from access.throttles import AnonymousRateThrottle, ClientRateThrottle
from movements.api import examples
from movements.api.exceptions import PROBLEM_CONTENT_TYPE
from movements.api.parsers import StrictJSONParser
from movements.api.serializers import ProblemSerializer
from qtg.core.contract import CONTRACT_HEADER, CONTRACT_VERSION

ERROR_DESCRIPTIONS = {
    400: "Invalid input (body, header or query parameter): `details` maps each field to "
    "its problems.",
    401: "No token, or an invalid one (`WWW-Authenticate: Token`).",
    403: "The token's user lacks the permission (or four-eyes forbids it), or the token's "
    "scopes do not cover the operation.",
    404: "No such resource visible to this client (or no such path).",
    409: "Not legal now: `details.current_state` names the movement's state.",
    413: "The body is larger than QTG_API_MAX_BODY_BYTES (64 KiB by default).",
    415: "The body is not JSON.",
    422: "The Idempotency-Key was already used with a different body.",
    429: "Too many requests: wait for `Retry-After` seconds.",
    500: "An unexpected failure: quote `details.request_id` (also `X-Request-ID`).",
    503: "The database (or another dependency) is unavailable: retry after `Retry-After` "
    "seconds; `details.request_id` names the request.",
}
# The `code` values each status may carry (stable, machine-readable), unless the operation
# names its own (``problem_responses(error_codes=...)``).
ERROR_CODES = {
    400: ("invalid", "parse_error"),
    401: ("not_authenticated", "authentication_failed"),
    403: ("permission_denied",),
    404: ("not_found",),
    # An action on a movement: refused in its state (or by a rule: window closed, nodes in
    # flight), or someone else changed it first.
    409: ("conflict", "stale_state", "illegal_state_transition"),
    413: ("payload_too_large",),
    415: ("unsupported_media_type",),
    422: ("idempotency_key_reused",),
    429: ("throttled",),
    500: ("server_error",),
    503: ("service_unavailable",),
}
# What any operation may answer, whatever it does: bad input or a bad query parameter, no or
# a bad token, a token without the scope, an unknown path, a body over the limit, throttling,
# a failure, the database down.
EVERY_OPERATION = (400, 401, 403, 404, 413, 429, 500, 503)


def problem_responses(
    *codes: int,
    descriptions: dict[int, str] | None = None,
    error_codes: dict[int, tuple[str, ...]] | None = None,
) -> dict:
    """The error responses of an operation, as `application/problem+json`: those it names and
    those every operation may give (``EVERY_OPERATION``), each with the codes it carries
    (``error_codes`` for those particular to the operation)."""
    descriptions = {**ERROR_DESCRIPTIONS, **(descriptions or {})}
    # An operation without a JSON body (no 415) never parses one: its 400 is `invalid` only.
    bodyless = {} if 415 in codes else {400: ("invalid",)}
    error_codes = {**ERROR_CODES, **bodyless, **(error_codes or {})}
    return {
        (code, PROBLEM_CONTENT_TYPE): OpenApiResponse(
            ProblemSerializer,
            description=f"{descriptions[code]} Codes: "
            + ", ".join(f"`{name}`" for name in error_codes[code])
            + ".",
            examples=[examples.problem(code, error_codes[code][0])],
        )
        for code in sorted({*codes, *EVERY_OPERATION})
    }


class APIDefaults:
    # What every endpoint of the API shares (a mixin without a docstring: drf-spectacular
    # would publish it as the description of every operation).
    authentication_classes = [ApiTokenAuthentication]
    permission_classes = [IsAuthenticated, TokenScope]
    throttle_classes = [ClientRateThrottle, AnonymousRateThrottle]
    parser_classes = [StrictJSONParser]
    # JSON only: the browsable API needs session login, which a token API does not offer.
    renderer_classes = [JSONRenderer]

    def query_parameters(self) -> set[str]:
        """The query parameters this operation understands."""
        return set()

    def finalize_response(self, request: Request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # Which contract answered (the schema's info.version, the payloads' version).
        response[CONTRACT_HEADER] = CONTRACT_VERSION
        return response

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        # A misspelt filter (?state=FAILED) must not quietly return everything.
        unknown = set(request.query_params) - self.query_parameters()
        if unknown:
            raise ValidationError({name: ["Unknown query parameter."] for name in sorted(unknown)})
