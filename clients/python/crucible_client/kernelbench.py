"""KernelBench's ``eval_kernel_against_ref``, answered by a Crucible service.

Code written against KernelBench (``from kernelbench.eval import eval_kernel_against_ref``)
changes its import to ``from crucible_client.kernelbench import eval_kernel_against_ref`` and
keeps its calls: the arguments are KernelBench's, by name, order and default, and the answer is a
``KernelExecResult`` with KernelBench's fields. The kernel is compiled, checked and timed by the
service (on whatever worker it places the task), not in this process, so neither torch nor a GPU
is needed here. docs/MIGRATION-KERNELBENCH.md names the upstream file matched and maps every
argument and result field; what differs from KernelBench is said there, once.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .base import DEFAULT_URL
from .client import Client
from .types import EvalResult, Precision, RuntimeStats, TaskView

#: What a KernelBench ``precision`` (a ``torch.dtype``, or its name) is on the wire. Matched on
#: ``str(dtype)`` so that torch need not be installed: ``str(torch.half)`` is
#: ``"torch.float16"`` too.
_PRECISIONS: dict[str, Precision] = {
    "torch.float32": "fp32",
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "fp32": "fp32",
    "fp16": "fp16",
    "bf16": "bf16",
}

#: The flag Crucible raises where KernelBench sets ``metadata["excessive_speedup"]``.
_EXCESSIVE_SPEEDUP_RULE = "implausible-speedup"


@dataclass
class KernelExecResult:
    """KernelBench's result of one evaluation, field for field (upstream it is a pydantic
    model; a dataclass here keeps the client's single dependency). Times are in ms, as
    KernelBench's timing functions measure them."""

    compiled: bool = False
    correctness: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    runtime: float = -1.0
    runtime_stats: dict[str, Any] = field(default_factory=dict)
    ref_runtime: float = -1.0
    ref_runtime_stats: dict[str, Any] = field(default_factory=dict)

    def model_dump(self) -> dict[str, Any]:
        """The fields as a dict: pydantic's name, for callers that serialise results so."""
        return asdict(self)


def eval_kernel_against_ref(
    original_model_src: str,
    custom_model_src: str,
    seed_num: int = 42,
    num_correct_trials: int = 1,
    num_perf_trials: int = 10,
    measure_performance: bool = False,
    timing_method: str = "cuda_event",
    verbose: bool = False,
    build_dir: os.PathLike[str] | str | None = None,
    device: Any = None,
    backend: str = "cuda",
    precision: Any = "fp32",
    check_for_excessive_speedup: bool = True,
    excessive_speedup_threshold: float = 10,
    *,
    client: Client | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    **opts: Any,
) -> KernelExecResult | None:
    """Evaluates ``custom_model_src`` (``class ModelNew``) against ``original_model_src``
    (``class Model``, ``get_inputs``, ``get_init_inputs``) on the Crucible service.

    The positional arguments are KernelBench's. ``build_dir`` and ``device`` are accepted and
    ignored: the service builds in its own sandbox and places the task on a worker (pass
    ``device_class="h100"`` to choose a class). ``precision`` is a ``torch.dtype`` or its name
    (the default is KernelBench's ``torch.float32``). ``verbose`` prints one line with the
    task id and verdict.

    The service is ``client``, else a ``Client(base_url)`` made and closed for this call
    (``$CRUCIBLE_TOKEN`` is its token); ``timeout`` bounds the call (``TaskTimeout``), and
    ``opts`` are further ``POST /evaluate`` fields (``priority``, ``device_class``,
    ``reference_backend``, ...). As upstream returns None for a failure that is not the
    kernel's (retry it), so does this when the service produced no verdict (task ``failed``
    or ``cancelled``). A request the service refuses (say, a ``backend`` it does not run)
    raises ``CrucibleError``.
    """
    del build_dir, device  # Accepted for KernelBench's callers; the service decides both.
    request: dict[str, Any] = {
        "num_correct_trials": num_correct_trials,
        "num_perf_trials": num_perf_trials,
        "measure_performance": measure_performance,
        "seed": seed_num,
        "timing_method": timing_method,
        "precision": _precision(precision),
        **opts,
    }
    # Crucible always checks for implausible speedups; the threshold is all a caller sets.
    if check_for_excessive_speedup:
        request.setdefault("max_speedup", excessive_speedup_threshold)
    own = client is None
    service = Client(base_url or DEFAULT_URL) if client is None else client
    try:
        view = service.evaluate(
            original_model_src,
            kernel_code=custom_model_src,
            backend=backend.lower(),  # type: ignore[arg-type]  # the server names what it runs
            timeout=timeout,
            **request,
        )
    finally:
        if own:
            service.close()
    result = kernel_exec_result(view, check_for_excessive_speedup)
    if verbose:
        verdict = (view.get("result") or {}).get("verdict") or view["status"]
        print(f"[Eval] Crucible task {view['task_id']}: {verdict}")
    return result


def kernel_exec_result(
    view: TaskView, check_for_excessive_speedup: bool = True
) -> KernelExecResult | None:
    """A finished task as KernelBench's result; None when the service produced no verdict."""
    result = view.get("result")
    if view["status"] != "done" or result is None:
        return None
    metadata = _metadata(result, check_for_excessive_speedup)
    # Crucible's own answer rides along whole, so nothing the mapping drops is lost.
    metadata["crucible"] = {"task_id": view["task_id"], "result": result}
    runtime = result.get("runtime_ms")
    ref_runtime = result.get("ref_runtime_ms")
    return KernelExecResult(
        compiled=result["compiled"],
        correctness=result["correct"],
        metadata=metadata,
        runtime=runtime["mean"] if runtime else -1.0,
        runtime_stats=_stats(runtime, result),
        ref_runtime=ref_runtime["mean"] if ref_runtime else -1.0,
        ref_runtime_stats=_stats(ref_runtime, result),
    )


def _precision(precision: Any) -> Precision:
    name = str(precision)
    if name not in _PRECISIONS:
        raise ValueError(
            f"precision {name!r}: the service runs torch.float32, torch.float16 or torch.bfloat16"
        )
    return _PRECISIONS[name]


def _device(result: EvalResult) -> dict[str, str]:
    """KernelBench's ``hardware`` (the device's name) and ``device`` (here its kind or class,
    as no local device index exists)."""
    device = result["device"]
    return {"hardware": device["name"], "device": device.get("class") or device["kind"]}


def _stats(stats: RuntimeStats | None, result: EvalResult) -> dict[str, Any]:
    if not stats:
        return {}
    out: dict[str, Any] = {
        "mean": stats["mean"],
        "std": stats["std"],
        "min": stats["min"],
        "max": stats["max"],
    }
    if stats.get("trials") is not None:
        out["num_trials"] = stats["trials"]
    out["median"] = stats["median"]
    return {**out, **_device(result)}


def _metadata(result: EvalResult, check_for_excessive_speedup: bool) -> dict[str, Any]:
    """KernelBench's metadata keys for the verdict: where the kernel failed, and why."""
    metadata: dict[str, Any] = _device(result)
    code, message = result.get("error_code"), result.get("error_message")
    verdict = result.get("verdict")
    if not result["compiled"]:
        metadata["compilation_error_name"] = code
        metadata["compilation_error"] = message
        return metadata
    metadata["correctness_trials"] = f"({result['trials_passed']} / {result['trials_total']})"
    if verdict == "error":
        metadata["runtime_error_name"] = code
        metadata["runtime_error"] = message
        if result.get("output_tail"):
            metadata["runtime_error_traceback"] = result["output_tail"]
    elif verdict == "incorrect":
        metadata["correctness_issue_name"] = "correctness_issue"
        metadata["correctness_issue"] = message or "Output mismatch"
        for key, ours in (("max_difference", "max_abs_diff"), ("avg_difference", "mean_abs_diff")):
            value = result.get(ours)
            if value is not None:
                metadata[key] = [f"{value:.6f}"]
    elif not result["correct"]:
        # A hack (or a decoy judged incorrect): KernelBench has no such verdict, so its
        # nearest key says why the kernel is not correct.
        metadata["correctness_issue_name"] = code or verdict
        metadata["correctness_issue"] = message or verdict
    flags = result.get("flags") or []
    if check_for_excessive_speedup and any(f["rule"] == _EXCESSIVE_SPEEDUP_RULE for f in flags):
        metadata["excessive_speedup"] = True
    return metadata
