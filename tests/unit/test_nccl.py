"""NCCL transport detection on real NCCL_DEBUG=INFO excerpts (sources in tests/data/nccl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.monitor.nccl import NcclTransportParser, parse_nccl_log

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl"


def _log(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("name", "kind", "network", "rdma", "devices"),
    [
        ("ib.log", "ib", "IB", True, ("mlx5_3:1", "mlx5_2:1", "mlx5_1:1", "mlx5_0:1")),
        ("ib_old_socket_listed.log", "ib", "IB", True, ("mlx5_0:1",)),
        ("roce.log", "roce", "IB", True, ("mlx5_4:1",)),
        ("roce_multi.log", "roce", "IB", True, ("mlx5_10:1", "mlx5_11:1")),
        (
            "ibext_roce.log",
            "roce",
            "IBext_v8",
            True,
            ("mlx5_2:1", "mlx5_3:1", "mlx5_0:1", "mlx5_1:1"),
        ),
        ("ibext_sharp.log", "ib", "IBext", True, ("mlx5_0:1", "mlx5_1:1", "mlx5_4:1", "mlx5_5:1")),
        ("socket_fallback.log", "socket", "Socket", False, ("ens3:172.31.5.237",)),
        ("socket_channels.log", "socket", "Socket", False, ()),
        ("socket_ib_disabled.log", "socket", "Socket", False, ("lo:127.0.0.1",)),
        ("efa_libfabric.log", "plugin", "AWS Libfabric", True, ()),
        ("roce_gid_warn.log", "roce", "IB", True, ()),
        ("nccl228_no_ib_h100.log", "socket", "Socket", False, ()),
        ("nccl226_no_ib_pod.log", "socket", "Socket", False, ("podnet1:10.0.123.96",)),
        ("nccl228_plugin_lines_no_ib.log", "socket", "Socket", False, ("net1:10.10.100.241",)),
    ],
)
def test_real_logs_give_the_transport_nccl_used(
    name: str, kind: str, network: str, rdma: bool, devices: tuple[str, ...]
) -> None:
    transport = parse_nccl_log(_log(name))
    assert transport is not None
    assert (transport.kind, transport.network, transport.rdma) == (kind, network, rdma)
    assert transport.devices == devices
    assert network in transport.evidence


def test_connection_lines_show_gpudirect_and_plugin_name() -> None:
    transport = parse_nccl_log(_log("ibext_roce.log"))
    assert transport is not None
    assert transport.plugin == "IBext_v8"
    assert "via NET/IBext_v8/1" in transport.evidence  # strongest evidence wins
    gdr = parse_nccl_log(
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
    )
    assert gdr is not None
    assert gdr.gdr
    assert gdr.describe().startswith("NET/IB (InfiniBand, GPU")


def test_socket_listing_alone_is_not_a_verdict() -> None:
    # NCCL < 2.6 prints NET/Socket before trying IB: no verdict until IB answers.
    parser = NcclTransportParser()
    first = "m:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>"
    assert parser.feed(first) is None
    assert parser.transport is None


def test_feed_reports_a_change_once_and_ignores_other_lines() -> None:
    parser = NcclTransportParser()
    changes = [parser.feed(line) for line in _log("roce.log").splitlines()]
    changes += [parser.feed("epoch 1 loss 0.5"), parser.feed("Using network IB")]
    verdicts = [c for c in changes if c is not None]
    assert [v.kind for v in verdicts] == ["roce"]
    assert parse_nccl_log("no nccl here\n") is None


@pytest.mark.parametrize(
    "name",
    ["nccl228_no_ib_h100.log", "nccl226_no_ib_pod.log", "nccl228_plugin_lines_no_ib.log"],
)
def test_an_ib_line_without_a_device_is_never_an_rdma_verdict(name: str) -> None:
    # NCCL >= 2.26 prints "NET/IB : Using [RO]; OOB eth0:..." with no IB device before it
    # falls back to sockets: no rank may show InfiniBand, not even for a moment.
    parser = NcclTransportParser()
    seen = [parser.feed(line) for line in _log(name).splitlines()]
    verdicts = [v for v in seen if v is not None]
    assert [v.kind for v in verdicts] == ["socket"]
    assert parser.transport is not None
    assert not parser.transport.rdma


def test_a_failed_ib_plugin_withdraws_a_device_list_but_not_connections() -> None:
    listed = "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>"
    failed = "h:1:2 [0] NCCL INFO Failed to initialize NET plugin IB"
    weak = NcclTransportParser()
    weak.feed(listed)
    assert weak.transport is not None
    assert weak.transport.kind == "ib"
    weak.feed(failed)
    assert weak.transport is None
    strong = NcclTransportParser()
    strong.feed("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0")
    strong.feed(failed)
    assert strong.transport is not None
    assert strong.transport.kind == "ib"
