"""Builds and loads: importing a task's Python files, and the candidate's CUDA extensions
(torch.utils.cpp_extension.load_inline) built in the CPU stage and loaded prebuilt in the
device stage. Runs in the runner (the candidate's process), except import_file(), which the
judge uses for the reference.

Owns: import_file(), build_key() (what the worker's build cache is keyed on),
ExtensionBuilds (the load_inline stand-in), ExtensionCalls (the wrapper that lets a profiled
forward count calls into the candidate's extensions), the use of the node's precompiled headers
(pch_variants, with_pch; the worker makes them: pch.py), nvcc's two front ends at once
(use_nvcc_overlap: nvcc_overlap.py).

May import: trusted, errors, spec, nvcc_overlap.
"""
import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys

from crucible_errors import CAUGHT, note_caught
from crucible_nvcc_overlap import SCRIPT as OVERLAP_SCRIPT
from crucible_nvcc_overlap import memory_allows, overlap_command
from crucible_spec import MAX_BUILDS
from crucible_trusted import Trusted, json_dumps

REFERENCE_MODULE = "crucible_reference"
CANDIDATE_MODULE = "crucible_candidate"
# Bump when what decides a load_inline build changes: the worker keys its build cache on it too.
BUILD_PROTOCOL = "build-v1"
# load_inline arguments that do not change what is built.
BUILD_ARGS_IGNORED = ("build_directory", "verbose", "keep_intermediates")
# What pch.py writes in each variant's directory: the flags it was made for.
PCH_VARIANT_FILE = "variant.json"


def import_file(name, path):
    """Import a file as its own module, registered in sys.modules before it executes so that
    inspect/linecache (and so @triton.jit) can find its source."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {os.path.basename(path)}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def build_key(arguments, torch_version, cuda_arch):
    """What decides a load_inline build: its arguments (not where it builds or how loudly),
    the torch it builds against and the target architecture."""
    material = {k: v for k, v in arguments.items() if k not in BUILD_ARGS_IGNORED}
    blob = json_dumps({"protocol": BUILD_PROTOCOL, "torch": torch_version, "arch": cuda_arch,
                        "args": material}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def pch_variants(pch_dir):
    """The node's precompiled headers of torch/extension.h (pch.py): (extra_cflags, with_cuda,
    directory) per variant; none where there is no such directory."""
    variants = []
    try:
        names = sorted(os.listdir(pch_dir)) if pch_dir else []
    except OSError:
        return variants
    for name in names:
        if name.startswith("."):   # a variant still being made
            continue
        path = os.path.join(pch_dir, name)
        try:
            with open(os.path.join(path, PCH_VARIANT_FILE), encoding="utf-8") as f:
                described = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(described, dict) and isinstance(described.get("cflags"), list):
            variants.append((tuple(described["cflags"]), bool(described.get("with_cuda")), path))
    return variants


def with_pch(arguments, variants):
    """Pure: load_inline's arguments with the directory of the variant made for the same
    extra_cflags (torch strips each flag) and the same with_cuda (torch's default: whether
    there are CUDA sources) first on the include path, as a copy; else the arguments as they
    are. GCC uses the precompiled header only when its flags match the compile's, and goes on
    to torch/extension.h itself otherwise, so nothing built changes meaning. A build that has
    include directories of its own is left alone: one of them could hold headers torch's
    would hide."""
    if arguments.get("extra_include_paths"):
        return arguments
    cflags = arguments.get("extra_cflags") or []
    if not isinstance(cflags, (list, tuple)) or not all(isinstance(f, str) for f in cflags):
        return arguments
    cflags = tuple(f.strip() for f in cflags)
    with_cuda = arguments.get("with_cuda")
    if with_cuda is None:
        with_cuda = bool(arguments.get("cuda_sources"))
    for variant_cflags, variant_cuda, path in variants:
        if variant_cflags == cflags and variant_cuda == bool(with_cuda):
            return dict(arguments, extra_include_paths=[path])
    return arguments


def use_nvcc_overlap(environ, python, cuda_home, script=OVERLAP_SCRIPT):
    """Points torch's builds at the copy of nvcc_overlap.py at `script` in front of
    `cuda_home`'s nvcc (through $PYTORCH_NVCC, which torch's ninja file runs as it is); an
    operator's own PYTORCH_NVCC (a ccache, say) is kept, and without a CUDA toolkit, a
    readable script or the memory for both front ends at once (memory_allows) nothing is set
    (torch's nvcc runs). Returns the value."""
    if "PYTORCH_NVCC" in environ or not memory_allows(environ):
        return environ.get("PYTORCH_NVCC")
    if cuda_home and python and os.access(script, os.R_OK):
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        if os.path.isfile(nvcc):
            environ["PYTORCH_NVCC"] = overlap_command(python, nvcc, script)
    return environ.get("PYTORCH_NVCC")


def load_extension_file(name, path, python_module):
    """Load a built extension the way load_inline would have after building it."""
    if not python_module:
        Trusted.torch.ops.load_library(path)
        return path
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class ExtensionCalls:
    """The functions of a candidate's extension whose CUDA source defines a __global__ kernel
    are wrapped where load_inline hands them out, so a profiled forward (KernelCounter) sees
    every call however the candidate keeps a reference to them; outside a profiled forward
    the wrapper only passes the call on."""
    counter = None

    @classmethod
    def wrap(cls, module, arguments):
        sources = arguments.get("cuda_sources")
        text = "\n".join(sources) if isinstance(sources, (list, tuple)) else str(sources or "")
        if "__global__" not in text or not hasattr(module, "__dict__"):
            return module
        for attr, value in list(vars(module).items()):
            if attr.startswith("_") or not callable(value) or isinstance(value, type):
                continue

            def call(*args, _fn=value, _name=attr, **kwargs):
                counter = cls.counter
                if counter is None:
                    return _fn(*args, **kwargs)
                return counter.custom_call(_name, _fn, args, kwargs)

            call.__name__ = attr
            call.__doc__ = getattr(value, "__doc__", None)
            try:
                setattr(module, attr, call)
            except (AttributeError, TypeError):
                pass
        return module


class ExtensionBuilds:
    """Stands in for torch.utils.cpp_extension.load_inline while the candidate runs.

    prepare stage (on the CPU, no GPU visible): each call is built in a directory of its own
    under <taskdir>/build (distinct sources never share a build directory or its lock file)
    and recorded as (name, key, file) for the worker, which caches the file node-wide.
    evaluate stage: a call whose key the worker prebuilt loads that file and skips the
    compiler; any other call builds as load_inline always does."""

    def __init__(self, taskdir, torch_version, cuda_arch, prebuilt, building, pch_dir=None):
        self.taskdir = taskdir
        self.pch_dir = pch_dir
        self._pch_variants = None
        self.torch_version = torch_version
        self.cuda_arch = cuda_arch
        self.building = building
        self.prebuilt = {}
        for entry in prebuilt:
            self.prebuilt[entry["key"]] = entry
        self.builds = []
        self.failure = None
        self.reused = 0
        self.raised = []   # note_caught lines of load_inline calls that raised

    def install(self):
        try:
            import torch.utils.cpp_extension as cpp
        except Exception:
            return
        # The task directory's copy: a runner forked from the warm template loaded its
        # modules from the template's directory, which the task's sandbox does not show.
        use_nvcc_overlap(os.environ, sys.executable, cpp.CUDA_HOME,
                         os.path.join(self.taskdir, os.path.basename(OVERLAP_SCRIPT)))
        real = cpp.load_inline
        signature = inspect.signature(real)
        builds = self

        def load_inline(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return real(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            try:
                return builds.load(real, arguments)
            except CAUGHT as e:
                note_caught(builds.raised, f"load_inline(name={arguments.get('name')!r})", e)
                raise

        load_inline.__doc__ = real.__doc__
        cpp.load_inline = load_inline

    def load(self, real, arguments):
        name = arguments.get("name")
        standalone = bool(arguments.get("is_standalone", False))
        python_module = bool(arguments.get("is_python_module", True))
        if not isinstance(name, str) or standalone:
            return real(**arguments)
        key = build_key(arguments, self.torch_version, self.cuda_arch)
        entry = self.prebuilt.get(key)
        if entry is not None and entry.get("name") == name:
            self.reused += 1
            return ExtensionCalls.wrap(load_extension_file(
                name, os.path.join(self.taskdir, entry["file"]), python_module), arguments)
        if not self.building or len(self.builds) >= MAX_BUILDS:
            return ExtensionCalls.wrap(real(**self.with_pch(arguments)), arguments)
        build_dir = os.path.join(self.taskdir, "build", key[:32])
        os.makedirs(build_dir, exist_ok=True)
        arguments["build_directory"] = build_dir
        try:
            result = real(**self.with_pch(arguments))
        except CAUGHT as e:
            if self.failure is None and "error building extension" in str(e).lower():
                self.failure = e
            raise
        self.builds.append({
            "name": name, "key": key, "python_module": python_module,
            "file": os.path.relpath(os.path.join(build_dir, name + ".so"), self.taskdir),
        })
        return result

    def with_pch(self, arguments):
        """`arguments` with the node's matching precompiled header (with_pch); the variants
        are listed once, at the first build."""
        if self._pch_variants is None:
            self._pch_variants = pch_variants(self.pch_dir)
        return with_pch(arguments, self._pch_variants)
