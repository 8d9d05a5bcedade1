"""A small JSON-over-HTTPS client for the lab's own calls to the real API server (the
kubelets' registrations, heartbeats and pod status), thread-safe, one connection per call.

The lab uses it rather than the ``kubernetes`` package because the calls are few and raw
(status subresources, merge patches, preconditions), and their answers are read as
plain dicts, as the embedded server's are."""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlparse

TOKEN_LIFETIME_S = 86400


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
    token: str | None = None  # a bearer token (a service account's), else the TLS client
    # A service account's token is asked for again once 80% of its lifetime has passed, as
    # the kubelet refreshes a pod's projected token (pkg/kubelet/token/token_manager.go
    # requiresRefresh): the renewal, and the monotonic time it is due.
    renew: Callable[[], str] | None = None
    renew_at: float = 0.0

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
            token = self._token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
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

    def _token(self) -> str | None:
        if self.renew is not None and time.monotonic() >= self.renew_at:
            self.token = self.renew()
            self.renew_at = time.monotonic() + TOKEN_LIFETIME_S * 0.8
        return self.token

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

    def as_service_account(self, namespace: str, name: str, context: ssl.SSLContext) -> Api:
        """The API as a pod of that service account: a token from the TokenRequest API
        (what the kubelet mounts into the pod as its projected token), bound to nothing,
        valid for a day and asked for again before it ends (a lab may stay up longer)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(name)}/token"

        def issue() -> str:
            issued = self.create(path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                        "spec": {"expirationSeconds": TOKEN_LIFETIME_S}})  # fmt: skip
            return issued["status"]["token"]

        api = Api(self.url, context, self.timeout, renew=issue)
        api._token()  # at once: a missing service account is said now, not at first use
        return api

    def ensure(self, path: str, body: Any) -> Any:
        """Create, or leave as it is when it exists (409)."""
        try:
            return self.create(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return None
