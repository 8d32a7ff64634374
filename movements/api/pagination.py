"""Page-number pagination whose parameters mean what the schema says: a page size outside
1..200 (or not a number) is a 400, not silently the default."""

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class MovementPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 200

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
