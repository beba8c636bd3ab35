"""Where the CLI finds its server and token: flag > CORRAL_URL/CORRAL_TOKEN > ~/.config/corral/config.json (the
URL may name several replicas, comma-separated: the clients fail over among them); and which CA verifies an
https:// server: CORRAL_CA_FILE > the config's `ca` (written by `corral up`/`corral login`) > the system's CAs."""

from __future__ import annotations

import os

from corral.api.paths import cli_config_file
from corral.sdk import litejson

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    import ssl

    from corral.sdk.client import CorralClient
    from corral.sdk.rest import RestClient

DEFAULT_PORT = 8600  # the server's default (corral.server.settings), kept here so the CLI starts fast


class ConfigError(Exception):
    pass


def resolve_target(url: str | None = None, token: str | None = None) -> tuple[str, str]:
    path = cli_config_file()
    saved = load_config()
    if url:
        source = "--url"
    elif os.environ.get("CORRAL_URL"):
        url, source = os.environ["CORRAL_URL"], "CORRAL_URL"
    elif saved.get("url"):
        url, source = saved["url"], f"the url in {path}"
    else:
        url, source = f"http://127.0.0.1:{DEFAULT_PORT}", ""
    check_urls(url, source)
    token = token or os.environ.get("CORRAL_TOKEN") or saved.get("token")
    if not token:
        raise ConfigError(f"no API token: set CORRAL_TOKEN or run `corral up` once to write {path}")
    return url, token


def check_urls(url: str, source: str) -> None:
    """`url` is one server's URL, or several replicas' separated by commas (the client fails over among them);
    ConfigError naming `source` (--url, CORRAL_URL, the config file) and what is wrong."""
    from corral.sdk.endpoints import parse_urls

    try:
        parse_urls(url)
    except ValueError as e:
        raise ConfigError(
            f"{source}: {e}; give the server's URL, or several replicas' separated by commas "
            "(https://head1:8600,https://head2:8600)"
        ) from None


def load_config() -> dict[str, str]:
    path = cli_config_file()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    try:
        saved: dict[str, str] = litejson.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from e
    return saved


def resolve_verify(url: str) -> ssl.SSLContext | bool:
    """The CA an https:// `url` (or a list of URLs with one) is verified against (never no verification)."""
    if not any(u.strip().startswith("https://") for u in url.split(",")):
        return True
    ca_file = os.environ.get("CORRAL_CA_FILE")
    if ca_file:
        try:
            pem = open(ca_file).read()
        except OSError as e:
            raise ConfigError(f"CORRAL_CA_FILE: cannot read {ca_file}: {e.strerror}") from e
    else:
        pem = load_config().get("ca", "")
    if not pem:
        return True
    import ssl

    try:
        return ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(f"the saved CA certificate is not valid PEM: {e}") from e


def make_client(url: str | None = None, token: str | None = None) -> CorralClient:
    from corral.sdk.client import CorralClient

    u, t = resolve_target(url, token)
    return CorralClient(u, t, verify=resolve_verify(u))


def make_rest_client(url: str | None = None, token: str | None = None, timeout_s: float = 30.0) -> RestClient:
    """The light client of the everyday commands (corral.sdk.rest), same server, token and CA as make_client."""
    from corral.sdk.rest import RestClient

    u, t = resolve_target(url, token)
    return RestClient(u, t, timeout_s=timeout_s, verify=resolve_verify(u))
