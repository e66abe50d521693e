"""The runner: everything that executes in the candidate's process, and nothing else.

The judge forks it (judge_setup.RunnerLink) before CUDA or any secret exists; it closes the
protocol channel and the gate, enters its own sandbox layer, then serves the judge's requests
over transport.py. Nothing it says is trusted by the judge: outputs are checked there; what the
runner reports can only count against the candidate (findings, failure verdicts).

Owns: runner_main(), Runner (one op_* method per request); the integrity checks it runs beside
the candidate are runner_checks.py's, the kernel counting of a profiled forward
runner_profile.py's (both parts of Runner).

May import: trusted, errors, channel (only the gate's fd number, to close it), tensors,
transport, sandbox, selftest, builds, memory, triton_aot, runner_checks, runner_profile. Never a
judge module.
"""
import base64
import os
import pickle
import sys
import traceback

import crucible_sandbox as sandbox
import crucible_selftest as selftest
import crucible_transport as transport
from crucible_builds import CANDIDATE_MODULE, ExtensionBuilds, import_file
from crucible_channel import GATE_FD
from crucible_contexts import use_one_queue
from crucible_errors import CAUGHT, classify, format_error
from crucible_memory import poison_free_memory
from crucible_runner_checks import CandidateChecks
from crucible_runner_profile import KernelCounting
from crucible_tensors import (FLUSH_BYTES, flatten, model_to_precision, seed_all, set_cpu_threads,
                              timed_call, to_device)
from crucible_triton_aot import TritonPrecompile, bounded_call, meta_tensor
from crucible_trusted import (PR_SET_PDEATHSIG, Trusted, capture_trusted, finite_or_none,
                              flush_std, os_exit, perf_counter_ns, prctl, sync_device)


class RunnerVerdict(Exception):
    def __init__(self, code, message, compiled=None):
        super().__init__(code)
        self.code, self.message, self.compiled = code, message, compiled


class Runner(CandidateChecks, KernelCounting):
    """Serves the judge's requests in the candidate's process. Nothing here is trusted by
    the judge: outputs are checked there; what the runner reports can only count against the
    candidate (findings, failure verdicts)."""

    def __init__(self, sock, taskdir):
        self.sock = sock
        self.taskdir = taskdir
        self.cand_path = os.path.join(taskdir, "candidate.py")
        self.xfer_dir = os.path.join(taskdir, "xfer")
        self.model = None
        self.slots = {}
        self.verify_sets = []
        self.kept = None
        self.inputs = None
        self.watched = {}
        self.precision = None
        self.loaded = False
        self.kernels = set()
        self.ext_globals = False

    def serve(self):
        while True:
            try:
                msg = transport.recv(self.sock)
            except transport.PeerGone:
                return
            op = msg.get("op")
            handler = getattr(self, "op_" + str(op), None)
            try:
                if handler is None:
                    raise ValueError(f"unknown request {op!r}")
                reply = handler(msg) or {}
            except RunnerVerdict as v:
                reply = {"verdict": {"code": v.code, "message": v.message,
                                     "compiled": v.compiled}}
            except CAUGHT as e:
                if self.loaded:
                    reply = {"verdict": {"code": classify(e, "RUNTIME"), "message": format_error(
                        e, self.cand_path, self.taskdir, f"during {op}")}}
                else:
                    reply = {"error": f"{type(e).__name__}: {e}"}
            reply["findings"] = reply.pop("extra", []) + self.integrity_findings()
            transport.send(self.sock, finite_or_none(reply))
            if op == "finish":
                return

    # -- requests ------------------------------------------------------------------------------

    def op_setup(self, msg):
        import torch
        self.device = msg["device"]
        self.backend = msg["backend"]
        capture_trusted(torch)
        reply = {}
        if self.device == "cuda":
            started = perf_counter_ns()
            if msg.get("one_queue"):
                use_one_queue()
            torch.cuda.init()
            torch.empty(1, device="cuda")
            reply["context_ms"] = (perf_counter_ns() - started) / 1e6
            self.flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
        else:
            set_cpu_threads(torch)
        self.exporter = transport.Exporter(torch, self.xfer_dir, "out")
        self.builds = ExtensionBuilds(self.taskdir, str(torch.__version__), msg.get("cuda_arch"),
                                      msg.get("prebuilt") or [],
                                      building=bool(msg.get("building")),
                                      pch_dir=msg.get("pch_dir"))
        self.current_frames = sys._current_frames
        return reply

    def op_import(self, msg):
        self.arm_checks()
        self.builds.install()
        try:
            self.cand = import_file(CANDIDATE_MODULE, self.cand_path)
        except CAUGHT as e:
            code = classify(e, "IMPORT")
            raise RunnerVerdict(code, format_error(e, self.cand_path, self.taskdir), False)
        self.kernels = self.find_kernels()
        return {"builds_reused": self.builds.reused}

    def op_prepare(self, msg):
        """The CPU stage's import: builds load_inline extensions into the task directory and
        reports them, a compiler failure, or what else the import raised (for the device stage
        to judge). With `triton_arch`, Triton's launches are intercepted first (before the
        candidate can keep the originals) for the dry run of `precompile`."""
        self.builds.install()
        if msg.get("triton_arch"):
            self.aot = TritonPrecompile(msg["triton_arch"], os.path.join(
                self.taskdir, "cache", "triton"))
            self.aot.install()
        import_error = None
        try:
            import_file(CANDIDATE_MODULE, self.cand_path)
        except CAUGHT as e:
            import_error = format_error(e, self.cand_path, self.taskdir)
        failure = None
        if self.builds.failure is not None:
            failure = format_error(self.builds.failure, self.cand_path, self.taskdir,
                                   "load_inline failed to build")
        return {"builds": self.builds.builds, "build_failure": failure,
                "import_error": import_error}

    def op_precompile(self, msg):
        """The CPU stage's dry run (triton_aot.py): ModelNew(*init) called once on the judge's
        CPU inputs with every Triton launch compiled for the device instead of run. Best
        effort: it reports how many kernel entries it wrote and why it stopped, never a
        verdict."""
        aot = getattr(self, "aot", None)
        module = sys.modules.get(CANDIDATE_MODULE)
        model_new = getattr(module, "ModelNew", None)
        if model_new is None or (aot is None and not self.builds.building):
            return {"kernels": 0, "stopped": "nothing to precompile"}
        torch = Trusted.torch
        init = pickle.loads(base64.b64decode(msg["init"]))
        meta = bool(msg.get("meta"))
        inputs = [meta_tensor(torch, d["meta"]) if "meta" in d else self.import_inputs([d])[0]
                  for d in msg["inputs"]]
        seed_all(msg["seed"], "cpu")

        def build():
            model = model_to_precision(model_new(*init), msg.get("precision", "fp32"))
            return model.eval() if isinstance(model, torch.nn.Module) else model

        seconds = int(msg.get("seconds") or 1)
        if aot is None:   # a CUDA candidate: what it builds in __init__ or forward builds here
            stopped = bounded_call(torch, build, inputs, seconds, meta)
            return {"kernels": 0, "stopped": stopped, "builds": self.builds.builds}
        kernels, stopped = aot.dry_run(torch, build, inputs, seconds, meta=meta)
        return {"kernels": kernels, "stopped": stopped, "helpers": aot.helpers_error}

    def op_selftest(self, msg):
        """The worker's start-up check: tries what the sandbox must refuse (selftest.py)."""
        report = selftest.probe(msg.get("targets") or {})
        desc = msg.get("tensor")
        if desc is not None:   # a CUDA tensor the judge shared: IPC through the sandbox
            torch = Trusted.torch
            t = transport.import_tensor(torch, desc, self.xfer_dir, torch.cuda.current_device())
            report["ipc_sum"] = float(t.sum().item())
        return {"report": report}

    def op_instantiate(self, msg):
        torch = Trusted.torch
        init = pickle.loads(base64.b64decode(msg["init"]))
        model_new = getattr(self.cand, "ModelNew", None)
        if model_new is None:
            raise RunnerVerdict("INSTANTIATION", "candidate.py defines no `ModelNew`", False)
        if not callable(model_new):
            raise RunnerVerdict("INSTANTIATION", f"`ModelNew` is not callable "
                                f"({type(model_new).__name__})", False)
        try:
            seed_all(msg["seed"], self.device)
            model = model_new(*to_device(init, self.device))
            if isinstance(model, torch.nn.Module):
                model = model_to_precision(model.to(self.device),
                                           msg.get("precision", "fp32")).eval()
            elif not callable(model):
                raise TypeError(f"ModelNew(...) returned a non-callable {type(model).__name__}")
            self.sync()
        except CAUGHT as e:
            code = classify(e, "INSTANTIATION")
            raise RunnerVerdict(code, format_error(e, self.cand_path, self.taskdir), False)
        self.model = model
        torch.set_grad_enabled(False)
        return {}

    def sync(self):
        sync_device(self.device)

    def import_inputs(self, descs, storages=None):
        torch = Trusted.torch
        args = []
        for d in descs:
            if "tensor" in d:
                index = torch.cuda.current_device() if self.device == "cuda" else None
                args.append(transport.import_tensor(torch, d["tensor"], self.xfer_dir, index,
                                                     shared=True, storages=storages))
            else:
                args.append(pickle.loads(base64.b64decode(d["value"])))
        return args

    def call_model(self, args, context):
        try:
            out = self.model(*args)
            self.sync()
            return out
        except CAUGHT as e:
            code = classify(e, "RUNTIME")
            raise RunnerVerdict(code, format_error(e, self.cand_path, self.taskdir, context))

    def op_forward(self, msg):
        args = self.import_inputs(msg["inputs"])
        if msg.get("poison") and self.device == "cuda":
            poison_free_memory()
        out = self.call_model(args, str(msg.get("context", "candidate forward raised")))
        findings = self.check_outputs(out, args, bool(msg.get("allow_alias")))
        if findings:
            # An output on an input's memory cannot go back over CUDA IPC (torch does not
            # re-share what it received): the judge gets a copy, the finding stands.
            out = [x.clone() if isinstance(x, Trusted.torch.Tensor) else x
                   for x in flatten(out)] if isinstance(out, (list, tuple)) else (
                out.clone() if isinstance(out, Trusted.torch.Tensor) else out)
        self.kept, self.inputs = out, args
        reply = {"outputs": self.export(out)}
        if findings:
            reply["extra"] = findings
        return reply

    def op_slot(self, msg):
        self.slots[msg["slot"]] = (self.import_inputs(msg["inputs"]),
                                   self.import_slots(msg.get("outputs") or []))
        return {}

    def op_time(self, msg):
        """One timed call. Its output goes into the judge's output slots when it fits them,
        after the timing ends: no IPC handle, event or pinned allocation inside a timed call,
        and the output's memory goes back to the allocator for the next one."""
        args, out_slots = self.slots[msg["slot"]]
        self.kept = None
        ms, out = timed_call(self, self.model, args, msg.get("method", "cuda_event"))
        kind = transport.copy_into_slots(Trusted.torch, out, out_slots)
        if kind is None:
            self.kept = out
            return {"ms": ms, "outputs": self.export(out)}
        del out
        self.sync()
        return {"ms": ms, "slots": kind}

    def import_slots(self, descs, storages=None):
        """The judge's output slots (mapped shared: what is written here is there for it)."""
        index = Trusted.torch.cuda.current_device() if self.device == "cuda" else None
        return [transport.import_tensor(Trusted.torch, d, self.xfer_dir, index, shared=True,
                                        storages=storages) for d in descs]

    def op_verify_setup(self, msg):
        """Maps the judge's verification slots: per set, its input slots and the slots its
        outputs go to. Their content is written by the judge afterwards, while this process
        is stopped. On CUDA the judge packs them into one allocation, mapped here once."""
        storages = {}
        self.verify_sets = [(self.import_inputs(entry["inputs"], storages),
                             self.import_slots(entry["outputs"], storages))
                            for entry in msg["sets"]]
        return {}

    def op_verify_run(self, msg):
        """The model on each verification set in turn, each output copied into its slot, one
        sync at the end (the judge's clock times the whole request and checks every slot):
        the calls queue behind each other as a training loop's do, so a busy host's wake-ups
        do not stretch every call of the floor."""
        torch = Trusted.torch
        for args, slots in self.verify_sets:
            out = self.call_model(args, "candidate forward raised (timing check)")
            tensors = [t for t in flatten(out) if isinstance(t, torch.Tensor)]
            for slot, t in zip(slots, tensors):
                if slot.shape == t.shape and slot.dtype == t.dtype:
                    slot.copy_(t)
            del out, tensors
        self.sync()
        return {}

    def op_release(self, msg):
        self.kept = None
        self.inputs = None
        self.slots = {}
        self.verify_sets = []
        if msg.get("trim") and self.device == "cuda":
            Trusted.torch.cuda.empty_cache()
        return {}

    def op_finish(self, msg):   # counted again: ModelNew may load prebuilt extensions lazily
        return {"builds_reused": self.builds.reused}

    # -- outputs -------------------------------------------------------------------------------

    def export(self, node, depth=0):
        torch = Trusted.torch
        if isinstance(node, torch.Tensor):
            t = node.detach()
            if type(t) is not torch.Tensor:
                t = t.as_subclass(torch.Tensor)   # its storage, whatever the subclass says
            desc, _ = self.exporter.export(t)
            return {"tensor": desc}
        if isinstance(node, (list, tuple)) and depth < 8:
            return {"seq": "tuple" if isinstance(node, tuple) else "list",
                    "items": [self.export(x, depth + 1) for x in node]}
        if node is None or type(node) in (int, float, bool, str):
            return {"value": node}
        return {"value": f"<{type(node).__name__}>"}


def runner_main(sock, taskdir, plan):
    """The forked runner: drops the protocol channel and the gate, enters its own sandbox
    layer, dies with the judge, and serves requests until told to finish; never returns."""
    code = 0
    try:
        for fd in (3, GATE_FD):
            try:
                os.close(fd)
            except OSError:
                pass
        if plan is not None:
            try:
                sandbox.enter_runner(plan)
                sandbox.close_ruleset(plan)
            except sandbox.SandboxError as e:
                # Told to the judge as the answer to its first request (nothing of the
                # candidate has run yet, so this is still our own code speaking).
                transport.recv(sock)
                transport.send(sock, {"sandbox_failed": {"layer": e.layer,
                                                          "error": str(e.message)[:2000]}})
                os_exit(3)
        import signal
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        Runner(sock, taskdir).serve()
    except BaseException:
        try:
            sys.stderr.write("crucible runner: internal error\n" + traceback.format_exc())
        except Exception:
            pass
        code = 1
    flush_std()
    os_exit(code)
