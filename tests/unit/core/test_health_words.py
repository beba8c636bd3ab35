"""A GPU's health reason in words (what alerts and the portal say): "Xid 79", never the code "xid" alone."""

from __future__ import annotations

import pytest

from corral.core.health import REASON_ADMIN_DISABLE, describe_gpu_fault


@pytest.mark.parametrize(
    ("reason", "detail", "words"),
    [
        pytest.param("xid", "fatal Xid 79: simulated Xid 79", "Xid 79", id="xid-with-its-code"),
        pytest.param("xid", "", "an Xid error", id="xid-code-unknown-after-a-restart"),
        pytest.param("off_bus", "simulated: GPU has fallen off the bus", "fallen off the bus", id="off-bus"),
        pytest.param("ecc_dbe", "1 new double-bit ECC errors", "double-bit ECC error", id="ecc"),
        pytest.param(REASON_ADMIN_DISABLE, "disabled by admin", "disabled by an admin", id="admin"),
        pytest.param("something_new", "", "something_new", id="unknown-as-it-is"),
    ],
)
def test_fault_words(reason: str, detail: str, words: str) -> None:
    assert describe_gpu_fault(reason, detail) == words
