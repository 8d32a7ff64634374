"""The API reads JSON only, and a body no JSON parser can handle is a 400, not a 500."""

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # json.loads recurses per nesting level: "[[[[...]]]]" deep enough exhausts it.
            raise ParseError("JSON parse error - nested too deeply") from None
