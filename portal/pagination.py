from rest_framework.pagination import CursorPagination, PageNumberPagination


class PagePagination(PageNumberPagination):
    """Default for listings people page through: `?page=` and `?page_size=` (max 500)."""

    page_size_query_param = "page_size"
    max_page_size = 500


class TimeCursorPagination(CursorPagination):
    """For large and time-ordered lists (audit, samples): stable under concurrent inserts."""

    ordering = "-created_at"
    page_size_query_param = "page_size"
    max_page_size = 1000
