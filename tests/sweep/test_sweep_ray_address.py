"""`teccl sweep --ray-address` to an address nobody answers on: exit 2 at once, naming it,
instead of waiting in ``ray.init`` (which has no timeout). Ray is an optional extra: a
stand-in module takes its place, and would hang if it were called."""

from __future__ import annotations

import socket
import sys
from types import SimpleNamespace

import pytest

import te_ccl.sweep.executors as executors
from te_ccl.deadline import until
from te_ccl.errors import SpecError
from tests.sweep.conftest import ONE_OK_ONE_FAILED


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A ``ray`` whose ``init`` records the address it is given and ends the test there."""
    calls: list[str] = []

    def init(address: str, **_: object) -> None:
        calls.append(address)
        raise ConnectionError("the stand-in connects nowhere")

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: False,
                                                            init=init))
    return calls


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_dead_address_exits_2_naming_it_without_calling_ray_init(
        teccl, grid_file, tmp_path, fake_ray, scheme):
    address = f"{scheme}127.0.0.1:{closed_port()}"
    code, _, err = teccl("sweep", str(grid_file(ONE_OK_ONE_FAILED)), "-o", str(tmp_path / "o"),
                         "--ray-address", address)
    assert code == 2 and not fake_ray
    assert address in err and "cannot reach a Ray cluster" in err and len(err.splitlines()) == 1


def test_a_live_address_is_handed_to_ray_init(fake_ray):
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        with pytest.raises(SpecError, match="cannot connect to a Ray cluster"):
            executors.RayExecutor(address)
    assert fake_ray == [address]


@pytest.mark.parametrize("address", ["host:port", "[::1:6379", ":6379"])
def test_an_address_that_is_no_host_and_port_is_refused(fake_ray, address):
    with pytest.raises(SpecError, match="expected auto, HOST:PORT or ray://HOST:PORT"):
        executors.RayExecutor(address)
    assert not fake_ray


def test_the_connect_waits_no_longer_than_the_deadline(monkeypatch):
    waited: list[float] = []

    def silent(address: tuple[str, int], timeout: float) -> socket.socket:
        waited.append(timeout)
        raise TimeoutError

    monkeypatch.setattr(socket, "create_connection", silent)
    with until(0.5), pytest.raises(SpecError, match=r"no answer in 0\.\d+ s"):
        executors.check_reachable("10.0.0.1:6379")
    assert waited and 0 < waited[0] <= 0.5
    with pytest.raises(SpecError, match="no answer in 3 s"):
        executors.check_reachable("ray://10.0.0.1")  # the Ray Client's port by default


def test_a_host_name_idna_cannot_encode_is_refused_naming_it():
    address = f"{'a' * 70}.example:6379"  # a label over 63 characters
    with pytest.raises(SpecError, match="cannot reach a Ray cluster at .*label"):
        executors.check_reachable(address)
