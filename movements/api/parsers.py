"""The API reads JSON only, and a body no JSON parser can handle is a 400, not a 500; a body
larger than QTG_API_MAX_BODY_BYTES is a 413, read no further than the limit."""

import io

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"
    default_detail = "The request body is too large."


# Deeper than any request of ours needs (params allow 16 levels), far shallower than what
# exhausts the parser's recursion.
MAX_NESTING = 64


def nesting_exceeds(body: bytes, limit: int) -> bool:
    """Whether the JSON text nests arrays/objects deeper than ``limit`` (strings skipped)."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        # Checked before parsing, not by catching RecursionError: json.loads recurses per
        # level in C, and a process whose recursion limit a library raised (py_ecc, under
        # web3/eth-account, sets 100000) would overflow the C stack and crash instead.
        limit = settings.QTG_API_MAX_BODY_BYTES
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        if nesting_exceeds(body, MAX_NESTING):
            raise ParseError("JSON parse error - nested too deeply")
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
