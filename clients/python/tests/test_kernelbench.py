"""``eval_kernel_against_ref`` against a live Crucible (conftest.py starts one on the CPU): a
correct and a wrong Triton ReLU read back under KernelBench's field names."""

from __future__ import annotations

from conftest import REPO, Server

from crucible_client import Client
from crucible_client.kernelbench import eval_kernel_against_ref

RELU = (REPO / "tests" / "problems" / "elementwise_relu.py").read_text()
CANDIDATES = REPO / "tests" / "candidates"
CORRECT = (CANDIDATES / "elementwise_relu__correct.py").read_text()
WRONG = (CANDIDATES / "elementwise_relu__wrong.py").read_text()


def test_a_correct_kernel_is_timed_against_its_reference(server: Server):
    result = eval_kernel_against_ref(
        RELU,
        CORRECT,
        num_perf_trials=5,
        measure_performance=True,
        backend="triton",
        build_dir="/nonexistent",  # ignored: the service builds
        base_url=server.url,
        timeout=600,
    )
    assert result is not None
    assert (result.compiled, result.correctness) == (True, True)
    assert result.runtime > 0 and result.ref_runtime > 0
    assert result.runtime_stats["mean"] == result.runtime
    assert result.metadata["correctness_trials"] == "(1 / 1)"
    # The CPU worker: its class and its kind are both "cpu".
    assert result.metadata["device"] == result.runtime_stats["device"] == "cpu"


def test_a_wrong_kernel_is_not_correct(server: Server):
    with Client(server.url) as client:
        result = eval_kernel_against_ref(RELU, WRONG, backend="triton", client=client, timeout=600)
    assert result is not None
    assert (result.compiled, result.correctness, result.runtime) == (True, False, -1.0)
    assert result.metadata["correctness_issue_name"] == "correctness_issue"
    assert result.metadata["crucible"]["result"]["verdict"] == "incorrect"
