"""The GPU Operator's controller (played by the lab) acts with its service account's token,
which the lab asks for again once 80% of its lifetime passed, as the kubelet refreshes a
pod's projected token (pkg/kubelet/token/token_manager.go): a lab left up for more than a
day keeps working (no build needed: the TokenRequest is answered here)."""

from __future__ import annotations

import ssl

from simulator.controlplane import client
from simulator.controlplane.client import Api


def test_the_service_accounts_token_is_renewed_before_it_ends(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    issued: list[dict] = []

    def create(self, path, body):
        issued.append({"path": path, "spec": body["spec"]})
        return {"status": {"token": f"token-{len(issued)}"}}

    monkeypatch.setattr(Api, "create", create)
    admin = Api("https://127.0.0.1:1", ssl.create_default_context())
    operator = admin.as_service_account("gpu-operator", "gpu-operator", admin.context)
    assert operator._token() == "token-1"
    assert issued == [{"path": "/api/v1/namespaces/gpu-operator/serviceaccounts/gpu-operator/token",
                       "spec": {"expirationSeconds": client.TOKEN_LIFETIME_S}}]  # fmt: skip
    clock[0] += client.TOKEN_LIFETIME_S * 0.79
    assert operator._token() == "token-1"
    clock[0] += client.TOKEN_LIFETIME_S * 0.02  # past 80%
    assert operator._token() == "token-2"
    assert len(issued) == 2
