"""LDAP password login: find the user (DN template, or a search), bind as it, read its groups. Every string a
user sends is escaped before it goes into a DN or a filter (LDAP injection: `*`, `)(`, NUL)."""

from __future__ import annotations

import math
import ssl
from dataclasses import dataclass
from pathlib import Path

from ldap3 import BASE, NONE, SUBTREE, Connection, Server, Tls
from ldap3.core.exceptions import LDAPException, LDAPSocketOpenError, LDAPStartTLSError
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn, parse_dn

from corral.core.directory import DirectoryIdentity
from corral.core.errors import UnavailableError, ValidationError
from corral.core.tenancy import check_name
from corral.server.settings import Settings

INVALID_CREDENTIALS = 49


@dataclass(frozen=True, slots=True)
class LdapConfig:
    url: str
    start_tls: bool = False
    ca_file: str = ""
    user_dn_template: str = ""  # "uid={username},ou=people,dc=example,dc=org"
    user_search_base: str = ""  # or search here with user_filter
    user_filter: str = "(uid={username})"
    bind_dn: str = ""  # the service account that searches ("" = anonymous)
    bind_password: str = ""
    group_search_base: str = ""  # "" = read the user's memberOf
    group_filter: str = "(|(member={user_dn})(uniqueMember={user_dn}))"
    group_name_attr: str = "cn"
    timeout_s: float = 5.0

    def check(self) -> None:
        """Contradictory or missing settings are refused at start, naming the setting."""
        if not self.url.startswith(("ldap://", "ldaps://")):
            raise ValidationError("ldap_url", f"expected ldap://HOST[:PORT] or ldaps://HOST[:PORT], got {self.url!r}")
        if self.start_tls and self.url.startswith("ldaps://"):
            raise ValidationError("ldap_start_tls", "StartTLS upgrades an ldap:// connection; ldaps:// is TLS already")
        if bool(self.user_dn_template) == bool(self.user_search_base):
            raise ValidationError(
                "ldap_user_dn_template",
                "set exactly one of CORRAL_LDAP_USER_DN_TEMPLATE and CORRAL_LDAP_USER_SEARCH_BASE",
            )
        if self.user_dn_template and "{username}" not in self.user_dn_template:
            raise ValidationError("ldap_user_dn_template", "must contain {username}")
        if self.user_search_base and "{username}" not in self.user_filter:
            raise ValidationError("ldap_user_filter", "must contain {username}")


def user_dn_from_template(template: str, username: str) -> str:
    """The bind DN of a user; the name is escaped as an RDN value (`,`, `+`, `=`, `\\`, NUL...)."""
    return template.replace("{username}", escape_rdn(username))


def fill_filter(template: str, **values: str) -> str:
    """An LDAP filter with each value escaped (`*` -> \\2a, `(` -> \\28, `)` -> \\29, `\\` -> \\5c, NUL -> \\00)."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", escape_filter_chars(value))
    return out


def _first_rdn_value(dn: str) -> str:
    try:
        return str(parse_dn(dn)[0][1])
    except (LDAPException, IndexError):
        return ""


class LdapDirectory:
    """Checks passwords against an LDAP directory. Blocking (network I/O): call it from a worker thread."""

    source = "ldap"

    def __init__(self, config: LdapConfig) -> None:
        config.check()
        self.config = config
        tls = None
        if config.url.startswith("ldaps://") or config.start_tls:
            tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=config.ca_file or None)
        self._server = Server(
            config.url,
            use_ssl=config.url.startswith("ldaps://"),
            tls=tls,
            get_info=NONE,
            connect_timeout=config.timeout_s,
        )

    def _connect(self, dn: str | None, password: str | None) -> Connection | None:
        """A bound connection, or None when the directory refuses the credentials. Raises UnavailableError
        when it cannot be reached or TLS fails (a clear error, not a refusal of the password)."""
        # ldap3 packs receive_timeout into a struct: whole seconds only
        conn = Connection(
            self._server,
            user=dn,
            password=password,
            receive_timeout=math.ceil(self.config.timeout_s),
            raise_exceptions=False,
            auto_bind=False,
        )
        try:
            conn.open()
            if self.config.start_tls and not conn.start_tls():
                raise UnavailableError(f"the LDAP directory {self.config.url} refused StartTLS")
            if conn.bind():
                return conn
        except (LDAPSocketOpenError, LDAPStartTLSError) as e:
            raise UnavailableError(f"the LDAP directory {self.config.url} cannot be reached: {e}") from e
        except LDAPException as e:
            raise UnavailableError(f"the LDAP directory {self.config.url} failed: {e}") from e
        code = (conn.result or {}).get("result")
        conn.unbind()
        if code == INVALID_CREDENTIALS:
            return None
        raise UnavailableError(
            f"the LDAP directory {self.config.url} refused a bind: {(conn.result or {}).get('description')}"
        )

    def _service(self) -> Connection:
        conn = self._connect(self.config.bind_dn or None, self.config.bind_password or None)
        if conn is None:
            raise UnavailableError("the LDAP service account (CORRAL_LDAP_BIND_DN) was refused by the directory")
        return conn

    def _find_user_dn(self, username: str) -> str | None:
        if self.config.user_dn_template:
            return user_dn_from_template(self.config.user_dn_template, username)
        conn = self._service()
        try:
            conn.search(
                self.config.user_search_base,
                fill_filter(self.config.user_filter, username=username),
                SUBTREE,
                attributes=[],
                size_limit=2,
            )
            entries = [e for e in conn.response or [] if e.get("type") == "searchResEntry"]
        finally:
            conn.unbind()
        return str(entries[0]["dn"]) if len(entries) == 1 else None  # none, or ambiguous: no login

    def _groups(self, conn: Connection, user_dn: str, username: str) -> set[str]:
        """The user's groups, each by its name attribute (cn) and its DN, so a mapping may name either."""
        names: set[str] = set()
        if self.config.group_search_base:
            attr = self.config.group_name_attr
            conn.search(
                self.config.group_search_base,
                fill_filter(self.config.group_filter, user_dn=user_dn, username=username),
                SUBTREE,
                attributes=[attr],
            )
            for e in conn.response or []:
                if e.get("type") != "searchResEntry":
                    continue
                names.add(str(e["dn"]))
                value = e["attributes"].get(attr)
                names.update(str(v) for v in (value if isinstance(value, list) else [value]) if v)
        else:
            conn.search(user_dn, "(objectClass=*)", BASE, attributes=["memberOf"])
            for e in conn.response or []:
                for dn in e.get("attributes", {}).get("memberOf", []) or []:
                    names.update(x for x in (str(dn), _first_rdn_value(str(dn))) if x)
        return names

    def authenticate(self, username: str, password: str) -> DirectoryIdentity | None:
        """The identity when the directory accepts this name and password; None when it does not (unknown user,
        wrong password, a name that is not a valid Corral user name). Raises UnavailableError when the
        directory cannot be asked. An empty password is refused here: LDAP treats it as an anonymous bind,
        which "succeeds" for any DN."""
        if not password or "\x00" in password:
            return None
        try:
            check_name("username", username)
        except ValidationError:
            return None
        user_dn = self._find_user_dn(username)
        if user_dn is None:
            return None
        conn = self._connect(user_dn, password)
        if conn is None:
            return None
        try:
            reader = self._service() if self.config.bind_dn else conn
            try:
                groups = self._groups(reader, user_dn, username)
            finally:
                if reader is not conn:
                    reader.unbind()
        except LDAPException as e:
            raise UnavailableError(f"the LDAP directory {self.config.url} failed reading groups: {e}") from e
        finally:
            conn.unbind()
        return DirectoryIdentity(username=username, groups=frozenset(groups), source=self.source)


def read_secret_file(setting: str, path: str) -> str:
    """A secret from a file named by a setting (never a setting's value itself, which `ps` and logs may show)."""
    if not path:
        return ""
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as e:
        raise ValidationError(setting, f"cannot read {path}: {e.strerror}") from e


def ldap_config_from(settings: Settings) -> LdapConfig | None:
    """The LDAP configuration the server settings describe, or None when CORRAL_LDAP_URL is empty."""
    if not settings.ldap_url:
        return None
    return LdapConfig(
        url=settings.ldap_url,
        start_tls=settings.ldap_start_tls,
        ca_file=settings.ldap_ca_file,
        user_dn_template=settings.ldap_user_dn_template,
        user_search_base=settings.ldap_user_search_base,
        user_filter=settings.ldap_user_filter,
        bind_dn=settings.ldap_bind_dn,
        bind_password=read_secret_file("ldap_bind_password_file", settings.ldap_bind_password_file),
        group_search_base=settings.ldap_group_search_base,
        group_filter=settings.ldap_group_filter,
        group_name_attr=settings.ldap_group_name_attr,
        timeout_s=settings.ldap_timeout_s,
    )


def build_ldap_directory(settings: Settings) -> LdapDirectory | None:
    """The server's LDAP directory, or None without CORRAL_LDAP_URL. Bad settings raise ValidationError at start."""
    config = ldap_config_from(settings)
    return LdapDirectory(config) if config else None
