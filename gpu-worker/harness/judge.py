"""The judge: the trusted process of an evaluation. It holds the secret input seeds, the
reference and its outputs, and the protocol channel; the candidate runs only in the runner
(runner.py), a process the judge forks and talks to through transport.py.

Owns: Evaluation (its bookkeeping, the requests to the runner, and the stages in protocol
order: the stages themselves are in judge_setup.py, judge_load.py, judge_correctness.py and
judge_performance.py, the check of the claimed times in judge_verify.py) and main(), the
judge's process from the sandbox to the exit status.

May import: every module below it, but never runner.py (harness.py hands main() the runner's
entry point; tests/harness/check_layers.py checks both).
"""
import os
import platform
import sys
import traceback

import crucible_sandbox as sandbox
import crucible_transport as transport
from crucible_channel import bind_channel, bind_gate, emit, gated, park_at_gate, wait_at_gate
from crucible_errors import (DEVICE_BUSY_EXIT, MAX_ERROR_CHARS, RUNNER_KILLED_EXIT, RunnerKilled,
                             SetupError, Verdict, format_error)
from crucible_integrity import HACK, MAX_FLAGS, RUNTIME_RULES, runtime_finding
from crucible_judge_correctness import CorrectnessStage
from crucible_judge_load import LoadStage
from crucible_judge_performance import PerformanceStage
from crucible_judge_setup import RunnerGone, SetupStage
from crucible_judge_verify import TimingVerification
from crucible_spec import reference_timing_from_spec, sandbox_plan
from crucible_timing_check import DeviceBusy
from crucible_trusted import Trusted, flush_std, os_exit, perf_counter_ns, sync_device

RUNNER_VERDICTS = ("IMPORT", "COMPILATION", "INSTANTIATION", "RUNTIME", "CUDA_FAULT", "RESOURCE")


class Evaluation(SetupStage, LoadStage, CorrectnessStage, PerformanceStage, TimingVerification):
    """The judge. Runs the stages in order; any stage may end the evaluation by raising
    Verdict."""

    def __init__(self, taskdir, serve_runner):
        self.serve_runner = serve_runner   # the runner's entry point (runner.runner_main)
        self.taskdir = os.path.abspath(taskdir)
        self.ref_path = os.path.join(self.taskdir, "reference.py")
        self.cand_path = os.path.join(self.taskdir, "candidate.py")
        self.xfer_dir = os.path.join(self.taskdir, "xfer")
        self.spec = None
        self.device = None
        self.stage_ms = {}
        self._stage = None
        self._stage_t0 = 0
        self._stage_parked = 0   # ns of the running stage spent parked at the gate
        self.candidate_loaded = False   # candidate code has run: later harness faults are its
        self.compiled = False
        self.runner = None
        self.findings = []
        self.result = {
            "compiled": False, "correct": False, "trials_passed": 0, "trials_total": 0,
            "max_abs_diff": None, "mean_abs_diff": None, "runtime_ms": None,
            "ref_runtime_ms": None, "speedup": None, "error_code": None, "error_message": None,
            "device": {"kind": "cpu", "name": "unknown"}, "stage_ms": self.stage_ms,
            "ref_timing_cached": False,
            "software": {"torch": None, "triton": None, "cuda": None,
                         "python": platform.python_version()},
            "flags": [],
        }

    # -- bookkeeping ---------------------------------------------------------------------------

    def begin(self, stage):
        """Close the running stage's clock and announce the next stage on fd 3."""
        self._end_stage()
        self._stage = stage
        self._stage_t0 = perf_counter_ns()
        self._stage_parked = 0
        emit({"event": "stage", "stage": stage})

    def _end_stage(self):
        if self._stage is not None:
            self.stage_ms[self._stage] = (
                perf_counter_ns() - self._stage_t0 - self._stage_parked) / 1e6
            self._stage = None

    def park(self, point=None):
        """Waits at the worker's gate between two device steps (`point` None: a `park` line)
        or before timing (`point` "timing_gate": a stage line), with the runner and whatever
        it started stopped, so that nothing of this task runs on the device while a neighbour
        times. Returns the gate's message. The time parked counts in stage_ms `parked` (or
        `timing_wait`), not in the stage it interrupts."""
        if not gated():
            return {}
        t0 = perf_counter_ns()
        paused = self.runner is not None and self.runner.pause()
        try:
            return wait_at_gate(point) if point else park_at_gate()
        finally:
            if paused:
                self.runner.resume()
            waited = perf_counter_ns() - t0
            self._stage_parked += waited
            key = "timing_wait" if point else "parked"
            self.stage_ms[key] = self.stage_ms.get(key, 0.0) + waited / 1e6

    def add_finding(self, rule, detail):
        """Keeps the first finding of each rule."""
        if rule in RUNTIME_RULES and all(f["rule"] != rule for f in self.findings):
            self.findings.append(runtime_finding(rule, detail))

    def hacks(self):
        return [f for f in self.findings if f["severity"] == HACK]

    def finish(self, verdict=None):
        """Fill in the verdict (if any) and write the single result line. A `hack` finding
        is never reported as correct: it becomes the verdict INTEGRITY unless the
        evaluation already ended with another error."""
        self._end_stage()
        if self.runner is not None:
            self.runner.stop()
        if verdict is not None:
            self.result["error_code"] = verdict.code
            self.result["error_message"] = verdict.message
            if verdict.compiled is not None:
                self.compiled = verdict.compiled
            if not verdict.keep_correct:
                self.result["correct"] = False
        hacks = self.hacks()
        if hacks:
            self.result["correct"] = False
            self.result["speedup"] = None   # timings stay for the record; no reward from them
            if self.result["error_code"] in (None, "CORRECTNESS"):
                self.result["error_code"] = "INTEGRITY"
                self.result["error_message"] = "integrity checks failed: " + "; ".join(
                    f"{f['rule']}: {f['detail']}" for f in hacks)[:MAX_ERROR_CHARS]
        room = MAX_FLAGS - len(self.result["flags"])
        self.result["flags"] = self.result["flags"] + self.findings[:max(room, 0)]
        self.result["compiled"] = bool(self.compiled)
        emit(dict({"event": "result"}, **self.result))

    def reference_failed(self, exc, context):
        """The problem itself is broken: REFERENCE, whatever the exception."""
        raise Verdict("REFERENCE", format_error(exc, self.ref_path, self.taskdir, context))

    def sync(self):
        sync_device(self.device)

    # -- the runner ----------------------------------------------------------------------------

    def ask(self, op, reply_later=False, **fields):
        """One request to the runner. A failure verdict it reports ends the evaluation; its
        death is judged from its exit status; its findings are kept (they can only count
        against the candidate). With `reply_later`, only sent: answer(op) reads the reply."""
        self._runner_io(op, lambda: self.runner.send(op, **fields))
        return None if reply_later else self.answer(op)

    def answer(self, op):
        """The runner's reply to the request `op`, checked as ask() describes."""
        reply = self._runner_io(op, self.runner.receive)
        failed = reply.get("sandbox_failed")
        if isinstance(failed, dict) and not self.candidate_loaded:
            raise sandbox.SandboxError(str(failed.get("layer")), str(failed.get("error")))
        for f in reply.get("findings") or []:
            if isinstance(f, dict) and f.get("rule") in RUNTIME_RULES:
                self.add_finding(f["rule"], f.get("detail", ""))
        v = reply.get("verdict")
        if isinstance(v, dict):
            code = v.get("code") if v.get("code") in RUNNER_VERDICTS else "RUNTIME"
            message = str(v.get("message") or "")[:MAX_ERROR_CHARS]
            raise Verdict(code, message, False if code == "COMPILATION" or v.get(
                "compiled") is False else None)
        if reply.get("error"):
            raise Verdict("RUNTIME", f"evaluation failed in the candidate's process: "
                          f"{str(reply['error'])[:MAX_ERROR_CHARS - 60]}")
        return reply

    def _runner_io(self, op, io):
        """`io()` (a send or a receive of the request `op`), its failures judged: the
        runner's death from its exit status, a broken channel as the candidate's doing."""
        try:
            return io()
        except RunnerGone:
            if not self.candidate_loaded:
                # Nothing of the candidate has run in it: the runner failed to start (its
                # sandbox, its imports), a fault of this node.
                raise SetupError(f"the runner ended during {op} before the candidate was "
                                 f"loaded (wait status {self.runner.reap()})")
            raise self.runner_died()
        except transport.TransportError as e:
            # Only the candidate can have written that: the runner's harness code sends whole
            # frames. The channel is lost, and so is the evaluation.
            self.add_finding("protocol-tampered", f"during {op}: {e}")
            raise Verdict("RUNTIME", f"the candidate's process broke its channel to the judge "
                          f"during {op}: {e}")

    def runner_died(self):
        import signal
        status = self.runner.reap()
        stage = self._stage or "unknown"
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and \
                self.spec.sandbox and self.spec.sandbox.get("seccomp"):
            # Its seccomp filter refuses sending SIGKILL, and the judge sends it only at the
            # end: the kernel (out of memory) or the worker killed it. Not a verdict the judge
            # can give: the worker decides from the task's cgroup (RunnerKilled).
            return RunnerKilled(stage)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            return Verdict("CRASH", f"the candidate's process was killed by {name} "
                           f"(stage {stage})")
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return Verdict("RUNTIME", f"the candidate's process exited with status {code} "
                       f"(stage {stage})")

    def share_inputs(self, inputs, content=True):
        """Copies of `inputs` for the runner, in memory of their own (a CUDA pool the runner
        maps nothing else of; files on CPU): returns (descriptions, the judge's view). Without
        `content`, the slots are only shaped like `inputs` and left empty (the judge writes
        them later), with no copy made on the way."""
        torch = Trusted.torch
        descs, views = [], []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                if self.device == "cuda":
                    with torch.cuda.use_mem_pool(self.share_pool):
                        copy_ = x.detach().clone() if content else torch.empty_like(x)
                    desc, view = self.exporter.export(copy_)
                else:
                    src = x.detach() if content else torch.empty_like(x)
                    desc, view = self.exporter.export(src, shared_file=True)
                descs.append({"tensor": desc})
                views.append(view)
            else:
                descs.append(transport.value_description(x))
                views.append(x)
        return descs, views

    def import_outputs(self, node, depth=0):
        """The runner's outputs as tensors the judge can compare (checked descriptions)."""
        torch = Trusted.torch
        if not isinstance(node, dict) or depth > 8:
            raise transport.TransportError("malformed output description")
        if "tensor" in node:
            index = torch.cuda.current_device() if self.device == "cuda" else None
            return transport.import_tensor(torch, node["tensor"], self.xfer_dir, index)
        if "items" in node and isinstance(node["items"], list) and len(node["items"]) <= 4096:
            items = [self.import_outputs(x, depth + 1) for x in node["items"]]
            return tuple(items) if node.get("seq") == "tuple" else items
        if "value" in node and (node["value"] is None or type(node["value"]) in (
                int, float, bool, str)):
            return node["value"]
        raise transport.TransportError("malformed output description")

    def run_candidate(self, descs, context, poison=True, allow_alias=False):
        """One forward of the candidate in the runner on shared inputs; its outputs."""
        reply = self.ask("forward", inputs=descs, poison=poison, allow_alias=allow_alias,
                         context=context)
        try:
            return self.import_outputs(reply.get("outputs"))
        except transport.TransportError as e:
            raise Verdict("RUNTIME", f"{context}: unusable output: {e}")

    def inputs_changed(self, views, pristine):
        torch = Trusted.torch
        for i, (view, orig) in enumerate(zip(views, pristine)):
            if isinstance(orig, torch.Tensor):
                if self.device == "cpu":
                    view = view.clone()   # the file as it is now
                if view.shape != orig.shape or not torch.equal(view, orig):
                    return i
        return None

    # -- stages --------------------------------------------------------------------------------

    def run(self):
        self.begin("setup")
        self.setup()
        if self.spec.stage == "prepare":
            self.prepare()
            return
        if self.spec.stage == "selftest":
            self.selftest()
            return
        self.begin("load_reference")
        self.load_reference()
        self.report_footprint()
        self._end_stage()
        message = wait_at_gate("standby")
        if "reference_timing" in message:
            self.spec.reference_timing = reference_timing_from_spec(message["reference_timing"])
        self.begin("load_candidate")
        self.load_candidate()
        torch = Trusted.torch
        with torch.no_grad():
            # Each device step starts at the gate (see park); the correctness trials park
            # between them too.
            self.park()
            self.begin("instantiate")
            self.instantiate()
            self.park()
            self.begin("correctness")
            self.correctness()
            if self.result["correct"] and self.checks:
                self.park()
                self.begin("profile")
                self.profile()
            if self.result["correct"] and self.spec.measure_performance \
                    and not self.hacks() and self.result.get("custom_kernel_count") != 0:
                if self.spec.reference_backend == "compile" \
                        and self.spec.reference_timing is None:
                    self.park()
                    self.begin("compile_reference")
                    self.compile_reference()
                self._end_stage()
                self.park("timing_gate")
                self.begin("performance")
                self.performance()
            self.park()
            self.begin("integrity")
            reused = self.ask("finish").get("builds_reused")
            if isinstance(reused, int) and reused > self.result.get("builds_reused", 0):
                self.result["builds_reused"] = reused
        self.finish()

    def restore_inputs(self, views, pristine):
        torch = Trusted.torch
        for view, orig in zip(views, pristine):
            if isinstance(orig, torch.Tensor) and view.shape == orig.shape:
                view.copy_(orig)
        self.sync()


def main(taskdir, serve_runner):
    """One evaluation of `taskdir`; `serve_runner` is the runner's entry point. Never returns."""
    bind_channel()
    bind_gate()
    plan = sandbox_plan(taskdir)
    if plan is not None:
        # From here on this process is the judge, inside every layer of the plan; the
        # process the worker started waits for it (sandbox.py).
        started = perf_counter_ns()
        try:
            layers = sandbox.enter_task(plan)
        except sandbox.SandboxError as e:
            _sandbox_failed(e)
        emit({"event": "sandbox", "layers": layers,
              "ms": (perf_counter_ns() - started) / 1e6})
    ev = Evaluation(taskdir, serve_runner)
    try:
        try:
            ev.run()
        except Verdict as v:
            ev.finish(v)
        except SetupError as e:
            sys.stderr.write(f"crucible harness: setup failed: {e}\n")
            flush_std()
            os_exit(3)
        except sandbox.SandboxError as e:
            _sandbox_failed(e)
        except DeviceBusy as e:
            sys.stderr.write(f"crucible harness: no quiet device to time on: {e}\n")
            flush_std()
            os_exit(DEVICE_BUSY_EXIT)
        except RunnerKilled as e:
            sys.stderr.write(f"crucible harness: the candidate's process was killed by SIGKILL "
                             f"from outside (stage {e})\n")
            flush_std()
            os_exit(RUNNER_KILLED_EXIT)
        except BaseException as e:   # a harness bug, or the candidate broke the harness
            detail = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            sys.stderr.write("crucible harness: internal error\n" + detail)
            if not ev.candidate_loaded:
                flush_std()
                os_exit(3)
            ev.finish(Verdict("RUNTIME", format_error(
                e, ev.cand_path, ev.taskdir,
                f"evaluation failed after the candidate was loaded (stage {ev._stage})")))
    except BaseException as e:       # could not even write the result (fd 3 gone?)
        sys.stderr.write(f"crucible harness: cannot write the result: {type(e).__name__}: {e}\n")
        flush_std()
        os_exit(1)
    flush_std()
    os_exit(0)


def _sandbox_failed(e):
    """A layer of the plan could not be entered: say which on fd 3 (the worker's start-up
    self-test drops an optional layer that fails, and refuses to serve without a required
    one) and end as a fault of this node."""
    try:
        emit({"event": "sandbox_failed", "layer": e.layer, "error": str(e.message)[:2000]})
    finally:
        sys.stderr.write(f"crucible harness: sandbox: {e}\n")
        flush_std()
        os_exit(3)
