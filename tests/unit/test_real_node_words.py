"""What the real node taught the words: the kubelet's ``OOMKilled`` is said with the
container's limit, and an image the registry does not have ends the job (its pods would
wait for ever) in one line naming the reference."""

from __future__ import annotations

from jupyter_ktrain.backends.kubernetes.status.derive import _missing_image
from jupyter_ktrain.failures import classify

REF = "127.0.0.1:5000/base/debian-python:no-such-tag"
# what the real kubelet on containerd 2.4 wrote in the pod's status (tests/cluster/realnode.py)
NOT_FOUND = (
    f'rpc error: code = NotFound desc = failed to pull and unpack image "{REF}": failed to '
    f"resolve image: {REF}: not found"
)


def test_oom_killed_names_the_kubelets_reason_and_the_limit() -> None:
    failure = classify(["allocating"], 137, "OOMKilled", "128Mi")
    assert failure.kind == "OOM"
    assert failure.explanation.startswith("OOMKilled: the container used more memory than its")
    assert "limit (128Mi)" in failure.explanation


def test_an_image_not_found_is_one_line_with_its_reference() -> None:
    backoff = f'ImagePullBackOff: Back-off pulling image "{REF}": ErrImagePull: {NOT_FOUND}'
    for said in (f"ErrImagePull: {NOT_FOUND}", backoff):
        line = _missing_image(said)
        assert "\n" not in line
        assert line.startswith(f"ErrImagePull: the image {REF} is not in its registry")


def test_a_registry_that_is_down_is_waited_on() -> None:
    down = (
        f'ErrImagePull: rpc error: code = Unknown desc = failed to pull and unpack image "{REF}": '
        "dial tcp 127.0.0.1:5000: connect: connection refused"
    )
    assert _missing_image(down) == ""
    assert _missing_image("FailedScheduling: 0/1 nodes are available") == ""
