"""Joining a cluster: fetch the CA from the agent port and pin it to the fingerprint in the join token (as
`kubeadm join` pins the discovery hash), then exchange the token and a CSR for the node's certificate."""

from __future__ import annotations

import ssl

import httpx

from corral.api.schemas import JoinCaOut, JoinIn, NodeCertOut
from corral.api.tls import fingerprint_pem, parse_join_token
from corral.sdk.client import CorralAPIError, CorralConnectionError, CorralSDKError, _api_error
from corral.sdk.endpoints import CONNECT_TIMEOUT_S, split_urls
from corral.sdk.errors import compute_failover_error


class JoinError(CorralSDKError):
    """The join cannot go on (wrong cluster, bad token); str() is one line for humans."""


def trust_ssl_context(ca_pem: str) -> ssl.SSLContext:
    """Verifies servers against this CA only (hostname checked)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def fetch_pinned_ca(url: str, fingerprint: str, timeout_s: float = 15.0, path: str = "/api/v1/join/ca") -> str:
    """The CA certificate the server at `url` presents, accepted only when its SHA-256 is `fingerprint`. The
    first request cannot verify the server (it does not know the CA yet): the pin is what makes it safe.
    `url` may name several replicas (comma-separated): the first that answers is asked."""
    urls = [u for u in split_urls(url) if u]
    if len(urls) > 1:
        failures: list[CorralConnectionError] = []
        for u in urls:
            try:
                return fetch_pinned_ca(u, fingerprint, min(timeout_s, CONNECT_TIMEOUT_S * 2), path)
            except CorralConnectionError as e:
                failures.append(e)
        raise compute_failover_error(failures)
    try:
        r = httpx.get(url.rstrip("/") + path, verify=False, timeout=timeout_s)  # noqa: S501 (pinned below)
    except httpx.TransportError as e:
        raise CorralConnectionError(f"cannot reach {url}: {e}") from e
    if r.status_code >= 400:
        raise _api_error(r)
    ca = JoinCaOut.model_validate(r.json()).ca
    try:
        got = fingerprint_pem(ca)
    except ValueError as e:
        raise JoinError(f"the server at {url} sent no CA certificate") from e
    if got != fingerprint:
        raise JoinError(
            f"the server at {url} presents CA {got}, not the {fingerprint} of the join token: "
            "refusing to join (wrong server, or someone in between)"
        )
    return ca


def join_cluster(url: str, token: str, node: str, csr_pem: str, timeout_s: float = 30.0) -> NodeCertOut:
    """Exchange the join token and a CSR for the node's certificate; the server is verified against the
    pinned CA. Raises JoinError, CorralAPIError (401: token refused, 409: the node name has a live
    certificate) or CorralConnectionError."""
    try:
        parsed = parse_join_token(token)
    except ValueError as e:
        raise JoinError(str(e)) from e
    urls = [u for u in split_urls(url) if u]
    if len(urls) <= 1:
        return _join_at(url, token, parsed.ca_fingerprint, node, csr_pem, timeout_s)
    # Several replicas: the next one is asked only when the join cannot have reached this one (the token is
    # spent by a join that went through, so a join is never sent twice).
    failures: list[CorralConnectionError] = []
    for u in urls:
        try:
            return _join_at(u, token, parsed.ca_fingerprint, node, csr_pem, timeout_s)
        except _JoinNotSent as e:
            failures.append(e)
        except CorralConnectionError as e:
            raise compute_failover_error([*failures, e], may_be_applied=True) from e
    raise compute_failover_error(failures)


class _JoinNotSent(CorralConnectionError):
    """The join request never left: the server could not be reached at all."""


def _join_at(url: str, token: str, fingerprint: str, node: str, csr_pem: str, timeout_s: float) -> NodeCertOut:
    try:
        ca = fetch_pinned_ca(url, fingerprint, timeout_s)
    except CorralConnectionError as e:
        raise _JoinNotSent(str(e)) from e
    body = JoinIn(token=token, node=node, csr=csr_pem)
    try:
        with httpx.Client(base_url=url.rstrip("/"), verify=trust_ssl_context(ca), timeout=timeout_s) as http:
            r = http.post("/api/v1/join", json=body.model_dump())
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise _JoinNotSent(f"join at {url} failed: {e}") from e
    except httpx.TransportError as e:
        raise CorralConnectionError(f"join at {url} failed: {e}") from e
    if r.status_code >= 400:
        err: CorralAPIError = _api_error(r)
        raise err
    return NodeCertOut.model_validate(r.json())
