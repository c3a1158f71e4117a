"""The JSON parser of both APIs: DRF's, with nesting bounded, so a body nested thousands deep
under the size limit is a 400 naming the body, not a RecursionError (a 500)."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_DEPTH = 32  # no request of either API nests deeper than a handful of levels


def json_depth(value) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                break
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


TOO_DEEP = f"JSON parse error - nested deeper than {MAX_DEPTH} levels"


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # deeper than Python's own parser goes
            raise ParseError(TOO_DEEP) from None
        if json_depth(data) > MAX_DEPTH:
            raise ParseError(TOO_DEEP)
        return data
