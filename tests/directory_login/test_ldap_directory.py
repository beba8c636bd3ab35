"""LdapDirectory against a real slapd: binds, groups, TLS, and LDAP injection (`*`, `)(`, NUL) refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from ldap3 import SUBTREE, Connection, Server

from corral.core.errors import UnavailableError, ValidationError
from corral.server.directory.ldap import LdapConfig, LdapDirectory, fill_filter, user_dn_from_template
from e2e.conftest import free_port

from .conftest import BASE_DN, GROUPS, PEOPLE, SEED_USERS, Slapd

INJECTIONS = [
    "*",
    "al*",
    "*)(uid=*",
    "alice)(uid=*",
    "alice)(|(uid=*",
    "alice\x00",
    "alice\x00)(uid=*",
    "alice,ou=people",
    "uid=alice",
    "alice\\2a",
    "(uid=alice)",
    "ALICE ",
]


def template(s: Slapd, **kw: object) -> LdapDirectory:
    return LdapDirectory(
        LdapConfig(url=s.url, user_dn_template=f"uid={{username}},{PEOPLE}", group_search_base=GROUPS, **kw)
    )  # type: ignore[arg-type]


def search(s: Slapd, **kw: object) -> LdapDirectory:
    return LdapDirectory(
        LdapConfig(
            url=s.url,
            user_search_base=PEOPLE,
            user_filter="(uid={username})",
            bind_dn=f"cn=admin,{BASE_DN}",
            bind_password="adminpw",
            group_search_base=GROUPS,
            **kw,
        )
    )  # type: ignore[arg-type]


def member_of(s: Slapd) -> LdapDirectory:
    """Groups from the user entry's memberOf (filled by slapd's memberof overlay), no group search."""
    return LdapDirectory(LdapConfig(url=s.url, user_dn_template=f"uid={{username}},{PEOPLE}"))


@pytest.mark.parametrize("how", ["template", "search", "memberOf"])
def test_a_right_password_gives_the_user_and_its_groups(slapd: Slapd, how: str) -> None:
    directory = {"template": template, "search": search, "memberOf": member_of}[how](slapd)
    me = directory.authenticate("dave", SEED_USERS["dave"])
    assert me is not None and me.username == "dave" and me.source == "ldap"
    assert {"vision", "nlp-leads", f"cn=vision,{GROUPS}"} <= set(me.groups)
    assert "nlp" not in me.groups and "interns" not in me.groups


@pytest.mark.parametrize("how", ["template", "search"])
@pytest.mark.parametrize(
    ("user", "password"),
    [
        ("alice", "wrong-password"),
        ("alice", SEED_USERS["bob"]),
        ("nobody", "whatever-1"),
        ("alice", ""),
        ("", SEED_USERS["alice"]),
    ],
)
def test_wrong_password_unknown_user_and_empty_password_are_refused(
    slapd: Slapd, how: str, user: str, password: str
) -> None:
    directory = template(slapd) if how == "template" else search(slapd)
    assert directory.authenticate(user, password) is None


@pytest.mark.parametrize("how", ["template", "search"])
@pytest.mark.parametrize("name", INJECTIONS)
def test_ldap_injection_in_the_user_name_never_logs_in(slapd: Slapd, how: str, name: str) -> None:
    """With alice's password, no crafted name logs in, as alice or as anyone."""
    directory = template(slapd) if how == "template" else search(slapd)
    assert directory.authenticate(name, SEED_USERS["alice"]) is None


def test_filter_values_are_escaped_so_a_wildcard_matches_nothing(slapd: Slapd) -> None:
    """The escaping itself, against the real server: unescaped, `*` would match every person and `)(` would
    rewrite the filter."""
    conn = Connection(Server(slapd.url), auto_bind=True)
    conn.search(PEOPLE, "(uid=*)", SUBTREE)
    assert len(conn.entries) == len(SEED_USERS)  # what an unescaped `*` would find
    for name in ("*", "al*", "*)(uid=*", "alice)(|(uid=*", "alice\x00"):
        f = fill_filter("(uid={username})", username=name)
        assert conn.search(PEOPLE, f, SUBTREE) is False or not conn.entries, (name, f)
    assert fill_filter("(uid={username})", username="*)(uid=*") == "(uid=\\2a\\29\\28uid=\\2a)"
    assert fill_filter("(uid={username})", username="a\x00") == "(uid=a\\00)"
    assert user_dn_from_template("uid={username},ou=people", "a,ou=x+cn=y") == "uid=a\\,ou\\=x\\+cn\\=y,ou=people"
    conn.unbind()


def test_start_tls_with_the_ca_works_and_an_unknown_ca_is_a_clear_error(slapd: Slapd) -> None:
    assert template(slapd, start_tls=True, ca_file=str(slapd.ca_file)).authenticate("alice", SEED_USERS["alice"])
    with pytest.raises(UnavailableError, match="LDAP"):  # the system's CAs do not know the test CA
        template(slapd, start_tls=True).authenticate("alice", SEED_USERS["alice"])


def test_ldaps_with_the_ca_works(slapd: Slapd) -> None:
    d = LdapDirectory(
        LdapConfig(
            url=slapd.ldaps_url,
            ca_file=str(slapd.ca_file),
            user_dn_template=f"uid={{username}},{PEOPLE}",
            group_search_base=GROUPS,
        )
    )
    me = d.authenticate("bob", SEED_USERS["bob"])
    assert me is not None and "nlp" in me.groups


def test_an_unreachable_directory_is_an_error_not_a_refusal() -> None:
    d = LdapDirectory(
        LdapConfig(url=f"ldap://127.0.0.1:{free_port()}", user_dn_template="uid={username},o=x", timeout_s=2)
    )
    with pytest.raises(UnavailableError, match="cannot be reached"):
        d.authenticate("alice", "alicepw-1")


def test_a_wrong_service_account_is_an_error(slapd: Slapd, tmp_path: Path) -> None:
    d = LdapDirectory(
        LdapConfig(url=slapd.url, user_search_base=PEOPLE, bind_dn=f"cn=admin,{BASE_DN}", bind_password="not-it")
    )
    with pytest.raises(UnavailableError, match="service account"):
        d.authenticate("alice", SEED_USERS["alice"])


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (LdapConfig(url="http://x"), "ldap_url"),
        (LdapConfig(url="ldaps://x", start_tls=True, user_dn_template="uid={username}"), "ldap_start_tls"),
        (LdapConfig(url="ldap://x"), "ldap_user_dn_template"),
        (LdapConfig(url="ldap://x", user_dn_template="uid=x", user_search_base="o=x"), "ldap_user_dn_template"),
        (LdapConfig(url="ldap://x", user_dn_template="uid=alice,o=x"), "ldap_user_dn_template"),
        (LdapConfig(url="ldap://x", user_search_base="o=x", user_filter="(uid=alice)"), "ldap_user_filter"),
    ],
)
def test_contradictory_settings_are_refused_naming_the_setting(config: LdapConfig, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        LdapDirectory(config)
    assert e.value.field == field
