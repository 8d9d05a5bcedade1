"""A small JSON-over-HTTPS client for the lab's own calls to the real API server (the
kubelets' registrations, heartbeats and pod status), thread-safe, one connection per call.

The lab uses it rather than the ``kubernetes`` package because the calls are few and raw
(status subresources, merge patches, preconditions), and their answers are read as
plain dicts, as the embedded server's are."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"{status}: {message}")


@dataclass
class Api:
    url: str
    context: ssl.SSLContext
    timeout: float = 30.0

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        raw: bool = False,
    ) -> Any:
        parsed = urlparse(self.url)
        connection = http.client.HTTPSConnection(
            parsed.hostname, parsed.port, context=self.context, timeout=self.timeout
        )
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = content_type
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        if raw and response.status < 400:
            return payload.decode(errors="replace")
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            decoded = payload.decode(errors="replace")
        if response.status >= 400:
            raise ApiError(response.status, decoded)
        return decoded

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, "application/merge-patch+json")

    def ensure(self, path: str, body: Any) -> Any:
        """Create, or leave as it is when it exists (409)."""
        try:
            return self.create(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return None
