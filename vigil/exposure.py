"""What a role exposes, and to whom: the secure-default checks made before anything listens.

Every listener binds to loopback unless configured (``VIGIL_LISTEN_HOST``, or the endpoint's own
host setting). The API and UI never serve "open" — no admin token configured and none stored, so
every caller is an admin — on an address other hosts can reach: start-up fails with one line
naming the setting and the fix. Generating a token on first start and printing it (as Jupyter
does) was considered and not chosen: in a container or a pod that line goes to a log pipeline
that more people can read than the Secret, and a headless deployment has nobody watching the
first start; refusing is explicit and the fix is one variable. OTLP ingest without a token on
a non-loopback address is allowed (agents on other hosts must reach it) but logged, with how to
lock it (``VIGIL_INGEST_TOKEN``, ``VIGIL_INGEST_AUTH``, mTLS in front, or a network policy).
"""

from __future__ import annotations

import ipaddress

import structlog

from collector.errors import SettingsError
from vigil.settings import ENV_PREFIX, Settings

__all__ = ["is_loopback", "refuse_open_api", "warn_open_ingest"]

log = structlog.get_logger(__name__)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` is reachable from this machine only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name (or "" = every interface): assume others can reach it


def _origin(settings: Settings, key: str) -> str:
    """The setting that decided an endpoint's bind address: its own, or ``listen_host``."""
    return key if getattr(settings, key) is not None else "listen_host"


def refuse_open_api(settings: Settings, api_open: bool) -> None:
    """Refuse to serve the API/UI open (every caller an admin) on a non-loopback address.

    Args:
        settings: the role's settings.
        api_open: whether the API would run open (no admin token, no stored token).

    Raises:
        SettingsError: naming the host setting and the fix.
    """
    host = settings.bind_host("http")
    if not api_open or is_loopback(host):
        return
    key = _origin(settings, "http_host")
    raise SettingsError(
        key,
        f"{ENV_PREFIX}{key.upper()}",
        "the API and UI would let every caller act as admin on a non-loopback address; set VIGIL_ADMIN_TOKEN "
        "(or create a token first: vigil tokens create --role admin --name <you>), or bind VIGIL_HTTP_HOST=127.0.0.1",
        host,
    )


def warn_open_ingest(settings: Settings, ingest_locked: bool) -> None:
    """Log once when OTLP ingest takes spans from anyone on a non-loopback address."""
    hosts = {settings.bind_host("otlp_http")}
    if settings.otlp_grpc_port:
        hosts.add(settings.bind_host("otlp_grpc"))
    exposed = sorted(h for h in hosts if not is_loopback(h))
    if exposed and not ingest_locked:
        log.warning(
            "otlp_ingest_open",
            hosts=exposed,
            hint="anyone who reaches these addresses can send spans: set VIGIL_INGEST_TOKEN (or VIGIL_INGEST_AUTH=true "
            "with ingest tokens), put mTLS in front, or restrict the port with a network policy",
        )
