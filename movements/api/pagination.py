"""Page-number pagination whose parameters mean what the schema says: a page size outside
1..200 (or not a number) is a 400, not silently the default; and the cursor paging over
movements' changes."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class PagePagination(PageNumberPagination):
    """Pages by number (``page``, ``page_size``), its schema with this API's own examples
    (``example_path``: the list it pages) and every member it always sends required."""

    page_size_query_param = "page_size"
    max_page_size = 200
    example_path = "/api/v1/movements/"

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
            problem = f"Must be an integer from 1 to {self.max_page_size}."
            raise ValidationError({self.page_size_query_param: [problem]})
        return int(raw)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"]["maximum"] = self.max_page_size
        return parameters

    def get_paginated_response_schema(self, schema):
        paged = super().get_paginated_response_schema(schema)
        # Every page carries all four (next and previous null at either end).
        paged["required"] = ["count", "next", "previous", "results"]
        # This API's own examples, not DRF's accounts/ boilerplate.
        base = f"https://qtg.example.com{self.example_path}"
        properties = paged["properties"]
        properties["count"]["example"] = 137
        properties["count"]["description"] = "How many match, over all pages."
        properties["next"]["example"] = f"{base}?page=3"
        properties["next"]["description"] = "The next page's URL; null on the last page."
        properties["previous"]["example"] = f"{base}?page=1"
        properties["previous"]["description"] = "The previous page's URL; null on the first."
        return paged


class MovementPagination(PagePagination):
    def get_paginated_response_schema(self, schema):
        # One schema for both ways of paging: page numbers give count/next/previous, a
        # cursor (updated_after) gives next/next_cursor.
        paged = super().get_paginated_response_schema(schema)
        paged["required"] = ["next", "results"]
        properties = paged["properties"]
        properties["count"]["description"] = "Page paging only: how many movements match."
        properties["previous"]["description"] = "Page paging only: the previous page's URL."
        paged["properties"]["next_cursor"] = {
            "type": "string",
            "nullable": True,
            "example": None,
            "description": "Cursor paging only: the position after this page's last movement; "
            "pass it as `cursor` to continue (`next` is null on the last page for now: poll "
            "again later with this cursor). Null on an empty page: keep your previous cursor.",
        }
        return paged


class MovementCursorPagination:
    """Cursor paging over changes: movements ordered by (``updated_at``, ``id``), oldest change
    first; the cursor is the position after the last one served, so a page never shifts while
    others change."""

    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    page_size = 50
    max_page_size = 200

    def get_page_size(self, request) -> int:
        return MovementPagination.get_page_size(self, request)

    # "<microseconds since the epoch>.<id hex>": every string the pattern allows decodes.
    CURSOR_PATTERN = r"\A[0-9]{1,17}\.[0-9a-f]{32}\Z"

    @staticmethod
    def encode(updated_at: datetime, pk: Any) -> str:
        micros = (updated_at - EPOCH) // timedelta(microseconds=1)
        return f"{micros}.{uuid.UUID(str(pk)).hex}"

    def decode(self, cursor: str) -> tuple[datetime, uuid.UUID]:
        if not re.match(self.CURSOR_PATTERN, cursor):
            raise ValidationError({self.cursor_query_param: ["Invalid cursor."]})
        micros, pk = cursor.split(".")
        return EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(pk)

    def paginate_queryset(self, queryset, request, view=None):
        # ``page`` means nothing here (the schema cannot say "not with cursor"): ignored, but
        # still held to what the schema says it is.
        page = request.query_params.get(MovementPagination.page_query_param)
        if page is not None and not (page.isascii() and page.isdigit() and int(page) >= 1):
            raise ValidationError({"page": ["Must be a positive integer."]})
        self.request = request
        size = self.get_page_size(request)
        cursor = request.query_params.get(self.cursor_query_param)
        if cursor is not None:
            updated_at, pk = self.decode(cursor)
            queryset = queryset.filter(
                Q(updated_at__gt=updated_at) | Q(updated_at=updated_at, pk__gt=pk)
            )
        rows = list(queryset[: size + 1])
        self.has_more = len(rows) > size
        rows = rows[:size]
        # Given on every non-empty page, the last one too: a poller continues from it.
        self.next_cursor = self.encode(rows[-1].updated_at, rows[-1].pk) if rows else None
        return rows

    def get_paginated_response(self, data):
        next_url = None
        if self.has_more:
            next_url = replace_query_param(
                self.request.build_absolute_uri(), self.cursor_query_param, self.next_cursor
            )
        return Response({"next": next_url, "next_cursor": self.next_cursor, "results": data})

    def get_schema_operation_parameters(self, view):
        return []

    def get_paginated_response_schema(self, schema):
        return MovementPagination().get_paginated_response_schema(schema)
