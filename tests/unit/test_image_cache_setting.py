"""CORRAL_IMAGE_CACHE_GB (executors/image_cache.parse_cache_gb): a positive number of GB (10^9 bytes), decimals
allowed; unset is 100 GB; "none" is no limit; anything else is refused naming the setting and what is wrong."""

from __future__ import annotations

import pytest

from corral.executors.image_cache import parse_cache_gb


@pytest.mark.parametrize(
    ("name", "text", "limit_bytes"),
    [
        ("unset: the default of 100 GB", "", 100 * 10**9),
        ("blank: the default", "  ", 100 * 10**9),
        ("whole GB", "100", 100 * 10**9),
        ("a decimal", "0.005", 5_000_000),
        ("a leading dot", ".5", 500_000_000),
        ("a trailing dot", "2.", 2 * 10**9),
        ("spaces around", " 7 ", 7 * 10**9),
        ("the maximum", "1000000", 10**15),
        ("one byte", "0.000000001", 1),
        ("no limit", "none", None),
        ("no limit, any case", "None", None),
        ("no limit, spelled out", "unlimited", None),
    ],
)
def test_accepted(name: str, text: str, limit_bytes: int | None) -> None:
    assert parse_cache_gb(text) == limit_bytes, name


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("zero is ambiguous", "0", "more than 0"),
        ("zero as a decimal", "0.0", "more than 0"),
        ("below a byte", "0.0000000001", "more than 0"),
        ("negative", "-1", "not a number"),
        ("a unit", "100GB", "not a number"),
        ("an exponent", "1e3", "not a number"),
        ("not a number", "lots", "not a number"),
        ("nan", "nan", "not a number"),
        ("infinity", "inf", "not a number"),
        ("too large", "1000001", "at most 1,000,000"),
        ("absurdly large", "9" * 400, "at most 1,000,000"),
        ("two dots", "1.2.3", "not a number"),
    ],
)
def test_refused(name: str, text: str, says: str) -> None:
    with pytest.raises(ValueError, match="CORRAL_IMAGE_CACHE_GB") as e:
        parse_cache_gb(text)
    assert says in str(e.value), name
