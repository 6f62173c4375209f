import pytest

from conccl import abi


@pytest.mark.parametrize("value, want", [
    (22809, (2, 28, 9)), (22900, (2, 29, 0)), (2708, (2, 7, 8)), ((2, 28, 9), (2, 28, 9)), ([2, 28], (2, 28, 0)),
    ("2.28.9", (2, 28, 9)), ("2.28", (2, 28, 0)), ("2.28.9+cuda13.0", (2, 28, 9)), ("22809", (2, 28, 9)),
])
def test_parse_versions(value, want):
    assert abi.parse_nccl_version(value) == want


@pytest.mark.parametrize("bad", [0, -1, "x.y", "", (2,), (1, 2, 3, 4), True])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        abi.parse_nccl_version(bad)


def test_same_minor_other_patch_matches():
    r = abi.check_abi(22809, (2, 28, 3), "torch")
    assert r.ok and "2.28.9" in r.reason and "2.28.3" in r.reason


@pytest.mark.parametrize("torch_v", [(2, 29, 0), (2, 27, 7), "3.28.9", 22903])
def test_other_minor_or_major_refused(torch_v):
    r = abi.check_abi(22809, torch_v, "torch")
    assert not r.ok
    assert r.reason.startswith("NCCL ABI mismatch") and "\n" not in r.reason


def test_unknown_versions_refused():
    assert not abi.check_abi(None, (2, 28, 9)).ok
    assert not abi.check_abi(22809, None).ok
    assert "drop-in" in abi.check_abi("junk", (2, 28, 9)).reason
