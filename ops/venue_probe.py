"""What the venues look like from here, measured on a schedule (by the gauges refresh, every
``QTG_GAUGES_SECONDS``) and stored with the gauges: each configured chain's endpoints and
their heads, and whether each attestation service (Iris) answers. The console's home page
reads the stored result; no page view asks a venue.

Every ask is bounded (``PROBE_TIMEOUT_SECONDS``); an endpoint that does not answer in time is
recorded as such, with the error's name.
"""

from __future__ import annotations

import os
from typing import Any

from ops.health import chain_head

PROBE_TIMEOUT_SECONDS = 2.0


def chain_endpoints(chain: dict[str, Any]) -> list[str]:
    """The environment variables naming a chain's RPC endpoints, the primary first."""
    more = chain.get("rpc_endpoints")
    return [
        str(v) for v in [chain.get("rpc_url_env"), *(more if isinstance(more, list) else [])] if v
    ]


def probe_chains(timeout: float = PROBE_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
    """Per configured chain: each endpoint's head (or why there is none), the highest head,
    and how far each endpoint lags behind it against the chain's reviewed limit."""
    from venues import conf

    chains = []
    for name, entry in sorted(conf.section("chains", "chains").items()):
        entry = entry or {}
        kind = str(entry.get("kind") or "evm")
        limit = entry.get("max_head_lag_slots" if kind == "solana" else "max_head_lag_blocks")
        endpoints = []
        for variable in chain_endpoints(entry):
            url = os.environ.get(variable, "")
            found: dict[str, Any] = {"endpoint": variable}
            if not url:
                found["error"] = "not set"
            else:
                try:
                    found["head"] = chain_head(url, kind, timeout)
                except Exception as exc:  # the endpoint is down or answered nonsense
                    found["error"] = type(exc).__name__
            endpoints.append(found)
        heads = [e["head"] for e in endpoints if "head" in e]
        top = max(heads) if heads else None
        for found in endpoints:
            if "head" in found:
                found["lag"] = top - found["head"]
        chains.append(
            {
                "chain": name,
                "kind": kind,
                "head": top,
                "max_lag": max((e["lag"] for e in endpoints if "lag" in e), default=None),
                "lag_limit": int(limit) if limit is not None else (150 if kind == "solana" else 3),
                "answering": len(heads),
                "endpoints": endpoints,
            }
        )
    return chains


def iris_urls() -> list[str]:
    """The environment variables naming attestation services (the file's and each chain's)."""
    from venues import conf

    names = [conf.load("chains").get("iris_url_env")]
    names += [(e or {}).get("iris_url_env") for e in conf.section("chains", "chains").values()]
    return sorted({str(n) for n in names if n})


def probe_iris(timeout: float = PROBE_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
    """Whether each attestation service answers HTTP at all (any answer below 500 is an
    answer: its root need not be a resource), and its status code."""
    import httpx

    services = []
    for variable in iris_urls():
        url = os.environ.get(variable, "")
        found: dict[str, Any] = {"service": variable, "reachable": False}
        if not url:
            found["error"] = "not set"
        else:
            try:
                status = httpx.get(url, timeout=timeout).status_code
                found.update(reachable=status < 500, status=status)
            except Exception as exc:  # refused, timed out, TLS
                found["error"] = type(exc).__name__
        services.append(found)
    return services


def probe() -> dict[str, Any]:
    return {"chains": probe_chains(), "iris": probe_iris()}
