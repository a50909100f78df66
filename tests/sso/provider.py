"""A real OpenID Connect provider process (the oidc-provider-mock package) for the SSO tests,
and a relay in front of its token endpoint that can hand the portal a different ID token, the
way a tampered or misrouted answer would."""

import json
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Provider:
    url: str
    process: subprocess.Popen

    def set_user(self, sub: str, claims: dict) -> None:
        """What the provider says about `sub` from now on (its next sign-in)."""
        response = requests.put(f"{self.url}/users/{sub}", json=claims, timeout=10)
        assert response.status_code == 204, response.text

    def authorize(self, authorize_url: str, sub: str) -> str:
        """Sign `sub` in at the provider's authorization page; returns where it sends the
        browser back (the portal's callback with code and state)."""
        response = requests.post(
            authorize_url, data={"sub": sub}, allow_redirects=False, timeout=10
        )
        assert response.status_code == 302, response.text
        return response.headers["Location"]

    def tokens_for(
        self, *, sub: str, client_id: str, nonce: str | None, base_url: str | None = None
    ) -> dict:
        """A genuine token answer of the provider for `client_id` (code flow, done here)."""
        base = base_url or self.url
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": "http://client.invalid/callback",
            "scope": "openid email profile",
            "state": "s",
        }
        if nonce is not None:
            params["nonce"] = nonce
        location = self.authorize(f"{base}/oauth2/authorize?{urlencode(params)}", sub)
        code = parse_qs(urlparse(location).query)["code"][0]
        response = requests.post(
            f"{base}/oauth2/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": params["redirect_uri"],
                "client_id": client_id,
                "client_secret": "any",
            },
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return response.json()


def start_provider(*extra_args: str) -> Provider:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), *extra_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"{url}/.well-known/openid-configuration", timeout=1).ok:
                return Provider(url=url, process=process)
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the OIDC provider did not start on port {port}")
        time.sleep(0.1)


def stop_provider(provider: Provider) -> None:
    provider.process.terminate()
    try:
        provider.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        provider.process.kill()


@dataclass
class TokenRelay:
    """Forwards token requests to the provider; `tamper(answer, request_form)` may rewrite
    the answer before the portal sees it. Requests are kept for inspection."""

    target: str
    tamper: object = None
    delay: float = 0.0
    requests_seen: list = field(default_factory=list)
    url: str = ""

    def start(self) -> "TokenRelay":
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
                relay.requests_seen.append(form)
                headers = {"Content-Type": self.headers.get("Content-Type", "")}
                if self.headers.get("Authorization"):
                    headers["Authorization"] = self.headers["Authorization"]
                upstream = requests.post(relay.target, data=body, headers=headers, timeout=10)
                answer = upstream.json()
                if relay.tamper is not None and upstream.ok:
                    answer = relay.tamper(answer, form)
                time.sleep(relay.delay)
                payload = json.dumps(answer).encode()
                self.send_response(upstream.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
