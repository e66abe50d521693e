"""The judge's `setup` stage, and the two stages that end there: `prepare` (the CPU stage:
import and builds, no device) and `selftest` (the worker's start-up proof of the sandbox).

Owns: SetupStage (a part of Evaluation: reading the typed spec, importing torch, capturing
the trusted functions, describing the device, forking the runner and checking its sandbox),
and RunnerLink, the judge's end of the runner.

May import: trusted, errors, channel, spec, tensors, transport, sandbox, selftest, builds,
triton_aot, memory. Never the runner: RunnerLink is handed the runner's entry point by harness.py.
"""
import base64
import os
import pickle
import platform
import random
import signal
import sys

import crucible_memory as memory
import crucible_sandbox as sandbox
import crucible_selftest as selftest
import crucible_transport as transport
import crucible_triton_aot as triton_aot
from crucible_builds import REFERENCE_MODULE, import_file
from crucible_channel import emit
from crucible_contexts import one_queue_fits, source_of, use_one_queue
from crucible_errors import CAUGHT, MAX_ERROR_CHARS, SetupError, Verdict
from crucible_spec import MAX_BUILDS, read_spec
from crucible_tensors import (FLUSH_BYTES, as_call_args, cpu_model_name, seed_all,
                              set_cpu_threads, tensor_nbytes, to_precision, triton_version)
from crucible_trusted import (PR_SET_DUMPABLE, Trusted, capture_trusted, flush_std,
                              perf_counter_ns, prctl)


class RunnerGone(Exception):
    """The runner process ended (crash, exit) while the judge waited on it."""


class RunnerLink:
    """The judge's end of the runner: forked before CUDA is initialised and before any secret
    exists, so the candidate's process never holds the input seeds, the reference outputs or
    the comparison, nor the protocol channel (fd 3) and the gate (fd 4). `serve` is the runner's
    entry point (runner.runner_main), handed down by harness.py, so that no module of the judge
    imports the runner's code."""

    def __init__(self, taskdir, plan, serve):
        import socket
        judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        flush_std()
        pid = os.fork()
        if pid == 0:
            judge_end.close()
            serve(runner_end, taskdir, plan)   # never returns
        runner_end.close()
        if plan is not None:
            sandbox.close_ruleset(plan)   # the runner was the last process to need it
        self.sock = judge_end
        self.pid = pid
        self.status = None

    def call(self, op, **fields):
        """Sends one request and returns the reply; RunnerGone when the runner died."""
        self.send(op, **fields)
        return self.receive()

    def send(self, op, **fields):
        """Sends one request; its reply is read by receive() (the judge may work meanwhile)."""
        try:
            transport.send(self.sock, dict(fields, op=op))
        except (transport.PeerGone, BrokenPipeError, ConnectionResetError):
            raise RunnerGone()

    def receive(self):
        try:
            return transport.recv(self.sock)
        except (transport.PeerGone, BrokenPipeError, ConnectionResetError):
            raise RunnerGone()

    def pause(self):
        """Stops the runner and whatever it started (SIGSTOP) while the judge waits at the
        worker's gate: a thread or process the candidate left behind cannot use the device
        while a neighbour times. When the judge is the init of the task's pid namespace that
        is every other process of the task (kill(-1) there reaches the namespace only); else
        the runner alone. Returns whether anything was stopped."""
        return self._signal(signal.SIGSTOP)

    def resume(self):
        """Undoes pause() (SIGCONT)."""
        return self._signal(signal.SIGCONT)

    def _signal(self, sig):
        if self.status is not None:
            return False
        try:
            os.kill(-1 if os.getpid() == 1 else self.pid, sig)
        except OSError:
            return False
        return True

    def stopped(self, everything):
        """A context in which every other process of the task is stopped (SIGSTOP), and with
        `everything` the runner too (TaskStop.resume_runner lets it go again inside it): what
        is timed never shares the CPU with processes the candidate left running. Every process
        of the task is visible only where the judge is the init of the task's pid namespace;
        elsewhere the runner alone is known."""
        return TaskStop(self, everything)

    def others(self, live_only=False):
        """The pids of the task's processes besides the judge and the runner (with
        `live_only`, zombies left out)."""
        if os.getpid() != 1:
            return []
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in (1, self.pid):
                if live_only and _proc_state(int(name)) in ("Z", None):
                    continue
                pids.append(int(name))
        return pids

    def threads(self):
        """The runner's thread count as the kernel shows it (/proc), or None once it is gone."""
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Threads:"):
                        return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return None

    def reap(self):
        """The runner's wait status once it has exited (waits for it)."""
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = 0
        return self.status

    def stop(self):
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass
        self.reap()


class TaskStop:
    """RunnerLink.stopped's context: the processes it stopped, continued when it ends."""

    def __init__(self, link, everything):
        self.link = link
        self.pids = link.others()
        self.runner_stopped = everything and link.status is None
        if self.runner_stopped:
            self.pids.append(link.pid)

    def __enter__(self):
        for pid in self.pids:
            _signal_quietly(pid, signal.SIGSTOP)
        return self

    def resume_runner(self):
        """Lets the runner go on while the rest of the task stays stopped."""
        if self.runner_stopped:
            self.runner_stopped = False
            self.pids.remove(self.link.pid)
            _signal_quietly(self.link.pid, signal.SIGCONT)

    def __exit__(self, *exc):
        for pid in self.pids:
            _signal_quietly(pid, signal.SIGCONT)
        return False


def _proc_state(pid):
    """A process's state letter from /proc/<pid>/stat (after the command's closing paren), or
    None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _signal_quietly(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:   # gone meanwhile
        pass


class SetupStage:
    """Evaluation's setup, prepare and selftest stages (judge.py puts the stages together)."""

    def setup(self):
        """Read the spec, import torch, capture trusted functions, describe the device; in the
        evaluate stage, fork the runner first (nothing secret exists yet) and set it up.

        A cuda-backend candidate on a CPU worker is answered here (UNSUPPORTED) without ever
        being imported: load_inline would try to build CUDA code.
        """
        spec = read_spec(self.taskdir)
        self.spec = spec
        self.device = spec.device
        self.result["trials_total"] = spec.num_correct_trials

        if self.device == "cpu" and spec.backend == "triton":
            # The worker sets it; make sure, before triton is first imported by the candidate.
            os.environ.setdefault("TRITON_INTERPRET", "1")
        try:
            import torch
        except Exception as e:
            raise SetupError(f"cannot import torch: {type(e).__name__}: {e}")
        capture_trusted(torch)
        # Read before the candidate runs; the worker keys its reference timing cache on these.
        self.result["software"] = {
            "torch": str(torch.__version__), "triton": triton_version(),
            "cuda": torch.version.cuda, "python": platform.python_version(),
        }

        if spec.stage == "prepare":
            # No device: the worker hides the GPU from this stage. The candidate is imported
            # (and its extensions built) in a runner, like everywhere else.
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            self.start_runner()
            self.ask("setup", device="cpu", backend=spec.backend, cuda_arch=spec.cuda_arch,
                     prebuilt=[], building=True, pch_dir=spec.pch_dir)
            self.check_runner()
            return
        if spec.backend == "cuda" and self.device == "cpu":
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            raise Verdict("UNSUPPORTED", "backend 'cuda' (nvcc / load_inline) needs a CUDA "
                          "device; this worker evaluates on CPU (Triton interpreter only)",
                          compiled=False)
        self.start_runner()
        # The runner makes its CUDA context (and loads the prebuilt extensions) while the judge
        # makes its own: two contexts side by side instead of one after the other. Each with
        # one hardware queue where its code cannot use a second (contexts.py): the driver
        # makes the node's contexts one at a time, and their queues are most of what it does.
        on_cuda = self.device == "cuda"
        self.ask("setup", device=self.device, backend=spec.backend,
                 cuda_arch=spec.cuda_arch, prebuilt=spec.prebuilt, pch_dir=spec.pch_dir,
                 one_queue=on_cuda and one_queue_fits(source_of(self.cand_path)),
                 reply_later=True)
        if on_cuda and one_queue_fits(source_of(self.ref_path)):
            use_one_queue()
        self.exporter = transport.Exporter(torch, self.xfer_dir, "in")
        # The input seeds: drawn here, after the fork, never sent to the runner.
        import secrets
        self.input_seed = secrets.randbits(63)
        self.rng = random.Random(secrets.randbits(63))
        if self.device == "cuda":
            started = perf_counter_ns()
            if not torch.cuda.is_available():
                raise SetupError("spec asks for device 'cuda' but torch sees no CUDA device")
            self.result["device"] = {"kind": "cuda", "name": torch.cuda.get_device_name()}
            self.flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            self.stage_ms["setup_judge_context"] = (perf_counter_ns() - started) / 1e6
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
            self.share_pool = torch.cuda.MemPool()
        else:
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            set_cpu_threads(torch)
        self.checks = spec.integrity_checks
        if not self.checks:
            self.add_finding("integrity-checks-off", "this worker ran without the runtime "
                             "integrity checks (a benchmark setting)")
        context_ms = self.answer("setup").get("context_ms")
        if isinstance(context_ms, (int, float)) and 0 <= context_ms < 1e7:
            # Before any candidate code: the runner's own clock of its context, as data.
            self.stage_ms["setup_runner_context"] = float(context_ms)
        self.check_runner()
        # Before any candidate code: what the judge compares the runner's threads with later.
        self.runner_threads_at_setup = self.runner.threads()

    def start_runner(self):
        """Forks the runner: before CUDA exists here (a forked child cannot use it) and before
        any secret does."""
        os.makedirs(self.xfer_dir, mode=0o700, exist_ok=True)
        self.runner = RunnerLink(self.taskdir, self.spec.sandbox, self.serve_runner)
        # No process of our uid (the runner included) may ptrace us or read our memory.
        prctl(PR_SET_DUMPABLE, 0)

    def check_runner(self):
        """The runner's sandbox as the kernel shows it, before any candidate code runs in it."""
        if self.spec.sandbox is not None:
            try:
                sandbox.check_runner(self.runner.pid, self.spec.sandbox)
            except (sandbox.SandboxError, OSError, KeyError, ValueError) as e:
                raise SetupError(str(e))

    def prepare(self):
        """The CPU stage the worker runs before the task takes the GPU: the syntax check,
        screening, then the runner imports the candidate with no GPU visible, building its
        load_inline extensions. Final here: SYNTAX, SCREENED and a compiler failure
        (COMPILATION); the builds are reported in a `prepared` line. Anything else the import
        raised is left for the GPU stage to judge (module-level code may need the GPU).
        Nothing secret exists in this process: it only builds."""
        self.begin("load_candidate")
        source = self.check_source()
        self.screen(source)
        self.candidate_loaded = True
        precompile = self.spec.triton_precompile is not None and self.spec.backend == "triton" \
            and triton_aot.capability_of(self.spec.cuda_arch) is not None
        # A CUDA candidate that builds its extensions in ModelNew.__init__ or on its first call
        # (not at import) gets the same dry run: its load_inline calls build here, not on the
        # device's time (best effort: one missed still builds on the device, same verdict).
        lazy_builds = self.spec.triton_precompile is not None and self.spec.backend == "cuda"
        reply = self.ask("prepare", triton_arch=self.spec.cuda_arch if precompile else None)
        self._end_stage()
        aot = {}
        imported = not reply.get("build_failure") and reply.get("import_error") is None
        if (precompile or lazy_builds) and imported:
            self.begin("precompile")
            aot = self.precompile()
            self._end_stage()
            if lazy_builds:
                # A dry run that ended early keeps the import's builds.
                dry = aot.pop("builds", None)
                if isinstance(dry, list):
                    reply["builds"] = dry
                aot = {}
        self.runner.stop()
        if reply.get("build_failure"):
            raise Verdict("COMPILATION", str(reply["build_failure"])[:MAX_ERROR_CHARS],
                          compiled=False)
        builds = reply.get("builds")
        import_error = reply.get("import_error")
        # The worker checks every field again (protocol.rs); here only the shape.
        if not isinstance(builds, list) or len(builds) > MAX_BUILDS or not all(
                isinstance(b, dict) for b in builds):
            raise Verdict("RUNTIME", "the candidate's process answered the prepare request "
                          "with a malformed build list")
        emit({"event": "prepared", "builds": builds,
              "import_error": None if import_error is None else str(import_error)[
                  :MAX_ERROR_CHARS],
              "stage_ms": self.stage_ms, "software": self.result["software"],
              "flags": self.result["flags"], **aot})

    def precompile(self):
        """The dry run (triton_aot.py): the reference's init inputs and inputs, made here on
        the CPU with the task's seed, go to the runner, which calls the candidate once with
        Triton's launches compiling for the device instead of running. Best effort: whatever
        goes wrong (the reference needs a GPU, the candidate crashes or hangs) only ends the
        dry run; the stage goes on to its `prepared` line and the device stage judges. Returns
        the `prepared` fields: the cache files written, the kernels compiled, why it stopped."""
        started = perf_counter_ns()
        kernels, stopped, builds = 0, None, None
        try:
            kernels, stopped, builds = self.dry_run()
        except RunnerGone:
            stopped = f"the candidate's process ended (wait status {self.runner.reap()})"
        except CAUGHT as e:   # the reference's code, the transport
            stopped = f"{type(e).__name__}: {e}"
        key = "build_dry_run" if self.spec.backend == "cuda" else "triton_precompile"
        self.stage_ms[key] = (perf_counter_ns() - started) / 1e6
        if stopped and self.spec.backend != "cuda":   # a CUDA one stops where it needs the GPU
            sys.stderr.write(f"crucible harness: triton dry run stopped after {kernels} "
                             f"kernel(s): {stopped}\n")
        # Listed whatever the runner said (it may have died after writing some): the worker
        # checks every file, and an entry only ever serves this candidate and reference.
        if self.spec.backend == "cuda":
            # Every build the runner made, those of the import included.
            return {"builds": builds}
        files = triton_aot.cache_files(self.taskdir, os.path.join(self.taskdir, "cache",
                                                                  "triton"))
        return {"triton_cache": files, "triton_kernels": kernels,
                "triton_stopped": None if stopped is None else str(stopped)[:500]}

    def dry_run(self):
        torch = Trusted.torch
        ref = import_file(REFERENCE_MODULE, self.ref_path)
        seed_all(self.spec.seed, "cpu")
        init = as_call_args(ref.get_init_inputs())
        # Their size first, as meta tensors (no memory): small inputs are then made on the
        # CPU with the task's seed, large ones go to the runner as meta tensors.
        inputs = memory.meta_inputs(ref, self.spec.seed, self.spec.precision)
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        meta = tensor_nbytes(tensors) > triton_aot.MAX_CPU_INPUT_BYTES
        if not meta or any(x.device.type != "meta" for x in tensors):
            seed_all(self.spec.seed, "cpu")
            inputs = to_precision(as_call_args(ref.get_inputs()), self.spec.precision)
            meta = False
        exporter = transport.Exporter(torch, self.xfer_dir, "aot")
        descs = []
        for x in inputs:
            if isinstance(x, torch.Tensor) and meta:
                descs.append({"meta": triton_aot.describe_meta(torch, x)})
            elif isinstance(x, torch.Tensor):
                desc, _ = exporter.export(x.detach().cpu(), shared_file=True)
                descs.append({"tensor": desc})
            else:
                descs.append({"value": base64.b64encode(pickle.dumps(x)).decode("ascii")})
        # A dry run that hangs in native code (the runner's own alarm cannot interrupt it)
        # must not spend the stage's deadline: the runner is stopped, the stage goes on.
        seconds = self.spec.triton_precompile
        self.runner.sock.settimeout(2 * seconds + 5)
        try:
            reply = self.runner.call(
                "precompile", seed=self.spec.seed, inputs=descs, seconds=seconds, meta=meta,
                precision=self.spec.precision,
                init=base64.b64encode(pickle.dumps(init)).decode("ascii"))
        except OSError as e:   # socket.timeout included
            return 0, f"no answer from the candidate's process: {type(e).__name__}", None
        finally:
            try:
                self.runner.sock.settimeout(None)
            except OSError:
                pass
        if not isinstance(reply, dict) or reply.get("error"):
            return 0, str(reply.get("error") if isinstance(reply, dict) else reply), None
        if reply.get("helpers"):
            sys.stderr.write(f"crucible harness: triton's driver helpers are left to the "
                             f"device stage: {str(reply['helpers'])[:300]}\n")
        kernels = reply.get("kernels")
        kernels = kernels if type(kernels) is int and 0 <= kernels <= 4096 else 0
        stopped = reply.get("stopped")
        builds = reply.get("builds")
        return kernels, None if stopped is None else str(stopped), \
            builds if isinstance(builds, list) else None

    def selftest(self):
        """The worker's start-up proof (no reference, no candidate): the runner tries what its
        sandbox must refuse and, on a GPU, maps a tensor shared from here (CUDA IPC)."""
        self.candidate_loaded = True   # the runner runs probe code from here on
        tensor = None
        if self.device == "cuda":
            torch = Trusted.torch
            descs, self.selftest_inputs = self.share_inputs([torch.ones(1024, device="cuda")])
            tensor = descs[0]["tensor"]
        reply = self.ask("selftest", targets=self.spec.selftest, tensor=tensor)
        self.runner.stop()
        emit({"event": "selftest", "runner": reply.get("report"),
              "judge": selftest.identity()})
