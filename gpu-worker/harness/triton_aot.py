"""Ahead-of-time Triton compiles in the CPU stage: a dry run of the candidate's forward on CPU
tensors with Triton's launches intercepted, so that every kernel it would launch is compiled
for the device's target into TRITON_CACHE_DIR, the entry the device stage's JIT looks up.

The device stage's JIT computes the specialisation of a launch from its arguments (dtypes,
16-byte divisibility of pointers and integers, integers equal to 1, constexprs) and compiles
`ASTSource(fn, signature, constexprs, attrs)` with the backend's options for the target; the
on-disk entry is keyed on that source, the backend (target, ptxas), the options and Triton's
own hash. Rather than rebuilding that key (its internals differ between Triton 3.6 and 3.9),
the dry run drives Triton's own `JITFunction.run` with `warmup=True` (compile, no launch)
under a stand-in driver that names the device's target: the same code computes the same key
and writes the same entry. A CPU tensor's data_ptr stands in for the device's (both
allocators align to far more than 16 bytes); a specialisation that differs on the device is
a cache miss there and JITs as before, never a different verdict.

Inputs larger than MAX_CPU_INPUT_BYTES (KernelBench's level 1 makes gigabytes) are made
and passed as meta tensors instead: shapes, strides and dtypes without memory, whose data_ptr
is the storage offset in bytes (a base of 0: as aligned as the device's allocations); the
model is then built, and the forward run, with meta as the default device, so torch's ops
between launches only infer shapes.

Triton's driver helpers, which the device stage would otherwise build with the host compiler
before its first launch, are built here too when the node allows it (libcuda present, a GPU
or not): `cuda_utils` and, where Triton builds one per signature (3.6), each kernel's
launcher; both are cached by the hash of their C source, so the device finds them the same
way. A helper that cannot be built here is left to the device stage.

Everything is best effort: the first exception (a `.cuda()` in the forward, a
`torch.cuda` query, a kernel Triton cannot compile) ends the dry run and is reported as why
it stopped; the device stage judges the candidate as if nothing had happened.

Owns: TritonPrecompile (the interception, installed before the candidate is imported, and
the dry run), capability_of(), cache_files() (what the judge reports to the worker),
describe_meta()/meta_tensor() (meta inputs between the judge and the runner).

May import: nothing of the harness (Triton is the candidate's, imported here only once
the candidate's process exists).
"""
import os
import re
import signal
import stat

# Bounds on what the CPU stage reports (the worker checks them again, protocol.rs).
MAX_CACHE_FILES = 256
MAX_CACHE_FILE_BYTES = 64 << 20
MAX_CACHE_BYTES = 256 << 20
# Most launches one dry run goes through (a launch Triton has compiled already costs nothing;
# what compiling costs is bounded by the dry run's time).
MAX_LAUNCHES = 4096
# Inputs up to this size are made on the CPU with their values; larger ones as meta tensors.
MAX_CPU_INPUT_BYTES = 256 << 20
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def capability_of(cuda_arch):
    """The device's compute capability as Triton's GPUTarget spells it (`"9.0"` -> 90,
    `"9.0a"` -> 90), or None when `cuda_arch` is not one."""
    m = re.match(r"^\s*(\d+)\.(\d+)[a-z]?\s*$", str(cuda_arch or ""))
    if m is None:
        return None
    return int(m.group(1)) * 10 + int(m.group(2))


class _Stop(BaseException):
    """Ends a dry run (its time or kernel budget is spent); a BaseException, so that neither
    the candidate's `except Exception` nor a helper's build swallows it."""


class _TargetDriver:
    """The stand-in for Triton's active driver during a dry run: it names the device's
    target and a device and stream, which is all the JIT asks of a driver to specialise and
    compile. Anything else (loading a binary, benchmarking) raises and ends the dry run."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def set_current_device(self, device):
        pass

    def __getattr__(self, name):
        raise RuntimeError(f"the dry run has no GPU driver ({name})")


class TritonPrecompile:
    """The interception and the dry run (runs in the candidate's process, the runner)."""

    def __init__(self, cuda_arch, cache_dir):
        self.capability = capability_of(cuda_arch)
        self.cache_dir = cache_dir
        self.active = False
        self.launches = 0
        self.installed = False
        self.error = None
        # Why Triton's driver helpers could not be built here (then they are not tried again).
        self.helpers_error = None

    def install(self):
        """Patches JITFunction.run and Autotuner.run before the candidate is imported (so
        it cannot keep the originals); both behave as before outside a dry run. False when
        Triton is missing or its shape is not the one this module knows."""
        if self.capability is None:
            self.error = "no cuda architecture"
            return False
        try:
            from triton.runtime import autotuner, jit
            from triton.runtime.driver import driver
            from triton.backends.compiler import GPUTarget
        except Exception as e:   # no triton: nothing to precompile
            self.error = f"triton unavailable: {type(e).__name__}: {e}"
            return False
        if not (hasattr(jit.JITFunction, "run") and hasattr(autotuner.Autotuner, "run")
                and hasattr(driver, "set_active") and hasattr(driver, "reset_active")):
            self.error = "unknown triton runtime layout"
            return False
        self.driver = driver
        self.target = GPUTarget("cuda", self.capability, 32)
        aot = self
        jit_run = jit.JITFunction.run
        tune_run = autotuner.Autotuner.run

        def run(fn, *args, grid, warmup, **kwargs):
            if not aot.active:
                return jit_run(fn, *args, grid=grid, warmup=warmup, **kwargs)
            aot.before_compile()
            # warmup=True: specialise and compile exactly as a launch would, then return
            # without launching (there is no device to launch on).
            kernel = jit_run(fn, *args, grid=grid, warmup=True, **kwargs)
            aot.build_helpers(kernel)
            return kernel

        def tune(tuner, *args, **kwargs):
            if not aot.active:
                return tune_run(tuner, *args, **kwargs)
            # The device benchmarks every config that survives pruning, compiling each:
            # compile them all here instead of benchmarking (no device).
            tuner.nargs = dict(zip(tuner.arg_names, args))
            try:
                configs = tuner.prune_configs(kwargs) if len(tuner.configs) > 1 \
                    else tuner.configs
                for config in configs:
                    tuner.fn.run(*args, **kwargs, **config.all_kwargs())
            finally:
                tuner.nargs = None
            return None

        jit.JITFunction.run = run
        autotuner.Autotuner.run = tune
        self.installed = True
        return True

    def build_helpers(self, kernel):
        """cuda_utils and the kernel's launcher, into the cache (see the module's doc)."""
        if self.helpers_error is not None:
            return
        try:
            from triton.backends.nvidia import driver as nvidia
            nvidia.CudaUtils()
            if hasattr(kernel, "src") and hasattr(kernel, "metadata"):
                nvidia.CudaLauncher(kernel.src, kernel.metadata)
        except Exception as e:   # no libcuda here, a Triton without these: the device builds
            self.helpers_error = f"{type(e).__name__}: {e}"[:300]

    def before_compile(self):
        if self.launches >= MAX_LAUNCHES:
            raise _Stop(f"more than {MAX_LAUNCHES} kernel launches")
        self.launches += 1

    def dry_run(self, torch, build, inputs, seconds, meta=False):
        """Builds the candidate's model (`build()`) and calls it once on `inputs` (CPU
        tensors) with launches compiling instead of running, for at most `seconds` (the
        worker's share of the task's budget, which the dry run is charged to); with `meta`,
        under meta as the default device (the inputs are meta tensors). Returns
        (kernel entries written, why it stopped or None). Never raises for the candidate's
        doing."""
        if not self.installed:
            return 0, self.error or "not installed"
        before = set(_entries(self.cache_dir))
        # Put back as it was afterwards: making the default driver again would ask CUDA.
        saved = getattr(self.driver, "_active", None)
        self.active = True
        self.driver.set_active(_TargetDriver(self.target))
        try:
            stopped = bounded_call(torch, build, inputs, seconds, meta)
        finally:
            self.active = False
            self.driver._active = saved
        written = len(set(_entries(self.cache_dir)) - before)
        return written, stopped


def bounded_call(torch, build, inputs, seconds, meta=False):
    """Builds the candidate's model (`build()`) and calls it once on `inputs` without grad,
    for at most `seconds` (SIGALRM); with `meta`, under meta as the default device. Both dry
    runs of the CPU stage: Triton's (launches compiling instead of running) and a CUDA
    candidate's (its lazily built extensions built on the way; the call itself fails once it
    needs the GPU). Returns why it stopped (None: it ran through). Never raises for the
    candidate's doing."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, int(seconds)))
    try:
        with torch.no_grad(), (torch.device("meta") if meta else _nothing()):
            build()(*inputs)
        return None
    except BaseException as e:   # the candidate's code: anything ends the dry run
        return f"{type(e).__name__}: {e}"[:500]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def describe_meta(torch, t):
    """A meta tensor as the judge sends it: shape, stride, storage offset, dtype."""
    return {"shape": list(t.shape), "stride": list(t.stride()),
            "offset": int(t.storage_offset()), "dtype": str(t.dtype).replace("torch.", "")}


def meta_tensor(torch, d):
    """The runner's meta tensor for describe_meta()'s description (no memory behind it)."""
    dtype = getattr(torch, str(d["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {d['dtype']!r}"[:100])
    shape = [int(x) for x in d["shape"]]
    stride = [int(x) for x in d["stride"]]
    base = torch.empty(0, dtype=dtype, device="meta")
    return base.as_strided(shape, stride, int(d["offset"]))


def _alarm(signum, frame):
    raise _Stop("the dry run ran out of time")


_HELPER = re.compile(r"^(cuda_utils|__triton_launcher)\.[A-Za-z0-9_.\-]+\.so$")


def _entries(cache_dir, helpers=False):
    """The complete entries in a Triton cache directory (a `__grp__*.json` file is written
    last, when every file of the entry is in place), and with `helpers` the driver helpers'
    (one shared object each, renamed into place whole)."""
    try:
        dirs = os.listdir(cache_dir)
    except OSError:
        return []
    found = []
    for d in dirs:
        try:
            names = os.listdir(os.path.join(cache_dir, d))
        except OSError:
            continue
        if any(n.startswith("__grp__") and n.endswith(".json") for n in names) or (
                helpers and len(names) == 1 and _HELPER.match(names[0])):
            found.append(d)
    return found


def cache_files(taskdir, cache_dir):
    """The files of the complete Triton cache entries under `cache_dir`, relative to
    `taskdir`: plain files only, never through a link, within MAX_CACHE_* (an entry that would
    pass them is left out whole). The worker checks all of it again."""
    out, total = [], 0
    root = os.path.relpath(cache_dir, taskdir)
    for d in sorted(_entries(cache_dir, helpers=True)):
        if not _NAME.match(d) or os.path.islink(os.path.join(cache_dir, d)):
            continue
        entry, size = [], 0
        try:
            names = sorted(os.listdir(os.path.join(cache_dir, d)))
        except OSError:
            continue
        for n in names:
            path = os.path.join(cache_dir, d, n)
            try:
                st = os.lstat(path)
            except OSError:
                entry = None
                break
            if not _NAME.match(n) or n.startswith(".") or not stat.S_ISREG(st.st_mode) \
                    or st.st_size > MAX_CACHE_FILE_BYTES:
                entry = None
                break
            entry.append(f"{root}/{d}/{n}")
            size += st.st_size
        if not entry or len(out) + len(entry) > MAX_CACHE_FILES or total + size > MAX_CACHE_BYTES:
            continue
        out.extend(entry)
        total += size
    return out
