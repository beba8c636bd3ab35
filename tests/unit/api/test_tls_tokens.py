"""The join token's format and fingerprints: a token names its row, its secret and the CA's SHA-256; anything
else is refused without echoing what was given."""

from __future__ import annotations

import pytest

from corral.api.tls import JoinToken, normalize_fingerprint, parse_join_token

FP = "sha256:" + "0123456789abcdef" * 4


def test_a_token_round_trips() -> None:
    token = JoinToken(id=42, secret="s3cr3t_-" * 4, ca_fingerprint=FP)
    assert parse_join_token(str(token)) == token
    assert parse_join_token(f"  {token}\n") == token


@pytest.mark.parametrize(
    "text",
    [
        "",
        "crj_abc",
        f"crj1.1.short.{FP[7:]}",
        "crj1.x.{}.{}".format("a" * 20, FP[7:]),
        "crj1.1.{}.{}".format("a" * 20, FP[7:-1]),
        "crj1.1.{}.{}".format("a.b" * 10, FP[7:]),
        "crj1.1.{}.{}".format("a" * 20, FP[7:].upper()),
        "crj1.{}.{}.{}".format("9" * 19, "a" * 20, FP[7:]),
    ],
)
def test_malformed_tokens_are_refused_without_echo(text: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_join_token(text)
    assert text not in str(e.value) or not text


@pytest.mark.parametrize("given", [FP, FP[7:], FP[7:].upper(), ":".join(FP[7:][i : i + 2] for i in range(0, 64, 2))])
def test_fingerprints_are_normalized(given: str) -> None:
    assert normalize_fingerprint(given) == FP


@pytest.mark.parametrize("given", ["", "sha256:", "sha256:" + "g" * 64, "md5:" + "0" * 32, FP + "00"])
def test_bad_fingerprints_are_refused(given: str) -> None:
    with pytest.raises(ValueError):
        normalize_fingerprint(given)
