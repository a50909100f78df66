"""The REST API over HTTP (requests), with the API's one error shape turned into ApiError."""

from collections.abc import Iterator
from typing import Any

import requests

TIMEOUT_SECONDS = 30
USER_AGENT = "gpu-portal-cli"


class ApiError(Exception):
    """The portal refused a request: HTTP status, the API's code, message and details."""

    def __init__(self, status: int, code: str, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail or {}

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "detail": self.detail,
        }


class ConnectionProblem(Exception):
    """The portal did not answer (wrong URL, down, timeout)."""


def _error_from(response: requests.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "code" in body:
        message = str(body.get("message", ""))
        return ApiError(response.status_code, str(body["code"]), message, body.get("detail"))
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    return ApiError(
        response.status_code, "http_error", f"HTTP {response.status_code} {response.reason}. {text}"
    )


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.base = url.rstrip("/") + "/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"
        self.session.headers["User-Agent"] = USER_AGENT
        self.session.headers["Accept"] = "application/json"

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        url = self.base + path.lstrip("/")
        try:
            response = self.session.request(method, url, timeout=TIMEOUT_SECONDS, **kwargs)
        except requests.RequestException as error:
            raise ConnectionProblem(
                f"The portal at {self.base} did not answer ({error.__class__.__name__}). "
                "Check GPU_PORTAL_URL."
            ) from error
        if response.status_code >= 400:
            raise _error_from(response)
        return response

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params=_clean(params)).json()

    def post(self, path: str, body: dict | None = None) -> Any:
        return self.request("POST", path, json=body or {}).json()

    def list(self, path: str, *, limit: int, **params) -> list[dict]:
        """Up to `limit` items of a paginated list, following its pages."""
        items: list[dict] = []
        page = self.get(path, page_size=min(limit, 500), **params)
        while True:
            items.extend(page["results"] if isinstance(page, dict) else page)
            if not isinstance(page, dict) or not page.get("next") or len(items) >= limit:
                return items[:limit]
            page = self.request("GET", page["next"].split("/api/v1/", 1)[1]).json()

    def download(self, path: str, **params) -> tuple[str | None, Iterator[bytes]]:
        """A streamed download: the file name the portal suggests and the body's chunks."""
        url = self.base + path.lstrip("/")
        try:
            response = self.session.get(
                url,
                params=_clean(params),
                stream=True,
                timeout=TIMEOUT_SECONDS,
                headers={"Accept": "*/*"},
            )
        except requests.RequestException as error:
            raise ConnectionProblem(
                f"The portal at {self.base} did not answer ({error.__class__.__name__})."
            ) from error
        if response.status_code >= 400:
            raise _error_from(response)
        return _filename(response.headers.get("Content-Disposition", "")), _chunks(response)


def _chunks(response: requests.Response) -> Iterator[bytes]:
    try:
        yield from response.iter_content(chunk_size=64 * 1024)
    except requests.RequestException as error:
        raise ConnectionProblem(
            f"The download broke off ({error.__class__.__name__}); nothing was kept."
        ) from error


def _filename(disposition: str) -> str | None:
    for part in disposition.split(";"):
        key, _, value = part.strip().partition("=")
        if key.lower() == "filename" and value:
            name = value.strip('"').replace("/", "_").replace("\\", "_")
            return name or None
    return None


def _clean(params: dict) -> dict:
    return {k: v for k, v in params.items() if v is not None and v != () and v != []}
