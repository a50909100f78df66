"""Streamed downloads (CSV, JSON) that never end as a silently short file.

A streamed response sends its status and headers before its rows are read, so an error in the
middle would leave the user a 200 with part of the file. Here the first chunk is produced
before the response exists: an error there (most come from the query) is an ordinary error
response. An error after it ends the body with an ERROR line (a CSV reader shows it as the last
row, a JSON document no longer parses) and aborts the transfer, which a chunked HTTP/1.1
response reports to the browser or curl as a failed download.
"""

import logging
from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse

logger = logging.getLogger(__name__)

FAILURE_LINE = (
    "\r\nERROR: the export failed part-way; this file is incomplete. Download it again.\r\n"
)


class DownloadInterrupted(Exception):
    """Raised to the server after the ERROR line, so it aborts the transfer."""


def streaming_download(
    chunks: Iterable[str], *, filename: str, content_type: str
) -> StreamingHttpResponse:
    """An attachment streamed from `chunks`; their first chunk is read here, before any
    status is sent, so exporters put their first row into it."""
    chunks = iter(chunks)
    first = next(chunks, "")
    response = StreamingHttpResponse(_guarded(first, chunks, filename), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _guarded(first: str, chunks: Iterator[str], filename: str) -> Iterator[str]:
    yield first
    try:
        yield from chunks
    except Exception as error:
        logger.exception("download %s failed part-way", filename)
        yield FAILURE_LINE
        raise DownloadInterrupted(f"{filename} is incomplete") from error
