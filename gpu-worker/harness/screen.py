"""Static screening of a candidate's source before it runs (standard library only).

    screen(source, backend) -> [{"rule": id, "severity": "reject" | "flag", "detail": "line N: ..."}]

The harness calls it in the `load_candidate` stage, after the syntax check and before the
candidate is imported; `DEFAULT_POLICY` says which rules reject and which only flag, and a
request may override it per rule (`"screening": {rule: "reject" | "flag" | "off"}` in
spec.json, applied by `apply_policy`). Screening is a first, cheap layer: it catches the known
shortcuts written plainly (docs/harness-protocol.md, "Screening"); it is not a sandbox.

May import: the standard library only (no harness module).
"""
import ast

REJECT, FLAG, OFF = "reject", "flag", "off"

DEFAULT_POLICY = {
    "no-modelnew": REJECT,
    "no-kernel": FLAG,
    "kernel-not-called": FLAG,
    "reference-model-used": REJECT,
    "try-except-fallback": REJECT,      # a try around a kernel launch, or a fallback to torch
    "try-except": FLAG,                 # any other try/except
    "module-attribute-assignment": REJECT,
    "introspection": REJECT,
    "ctypes": REJECT,
    "dynamic-code": REJECT,
    "threads-processes": REJECT,
    "streams": FLAG,
    "precision-toggle": FLAG,
    "file-or-socket": FLAG,
}
RULES = tuple(DEFAULT_POLICY)
MAX_FINDINGS = 64
MAX_DETAIL = 200

# Imports that are a finding by themselves: module prefix -> rule.
_IMPORT_RULES = {
    "gc": "introspection", "inspect": "introspection", "traceback": "introspection",
    "ctypes": "ctypes", "cffi": "ctypes", "_ctypes": "ctypes",
    "importlib": "dynamic-code", "runpy": "dynamic-code", "code": "dynamic-code",
    "marshal": "dynamic-code", "pickle": "dynamic-code", "types": None,
    "threading": "threads-processes", "_thread": "threads-processes",
    "multiprocessing": "threads-processes", "subprocess": "threads-processes",
    "concurrent": "threads-processes", "asyncio": "threads-processes",
    "signal": "threads-processes", "pty": "threads-processes",
    "torch.multiprocessing": "threads-processes",
    "socket": "file-or-socket", "urllib": "file-or-socket", "http": "file-or-socket",
    "requests": "file-or-socket", "shutil": "file-or-socket", "tempfile": "file-or-socket",
    "pathlib": "file-or-socket", "io": "file-or-socket",
}
# Dotted names (after resolving import aliases) whose use is a finding.
_NAME_RULES = {
    "sys._getframe": "introspection", "sys.modules": "introspection",
    "sys.settrace": "introspection", "sys.setprofile": "introspection",
    "sys._current_frames": "introspection", "sys.exc_info": "introspection",
    "sys.meta_path": "introspection", "sys.path_hooks": "introspection",
    "builtins.globals": "introspection", "builtins.locals": "introspection",
    "builtins.vars": "introspection",
    "builtins.exec": "dynamic-code", "builtins.eval": "dynamic-code",
    "builtins.compile": "dynamic-code", "builtins.__import__": "dynamic-code",
    "os.fork": "threads-processes", "os.forkpty": "threads-processes",
    "os.system": "threads-processes", "os.popen": "threads-processes",
    "os.posix_spawn": "threads-processes", "os.posix_spawnp": "threads-processes",
    "os.kill": "threads-processes", "os._exit": "threads-processes",
    "torch.cuda.Stream": "streams", "torch.cuda.stream": "streams",
    "torch.cuda.set_stream": "streams", "torch.cuda.current_stream": "streams",
    "torch.cuda.default_stream": "streams", "torch.cuda.ExternalStream": "streams",
    "torch.cuda.CUDAGraph": "streams", "torch.cuda.graph": "streams",
    "torch.Stream": "streams", "torch.cuda.Event": "streams",
    "torch.set_float32_matmul_precision": "precision-toggle",
    "torch.autocast": "precision-toggle", "torch.cuda.amp.autocast": "precision-toggle",
    "torch.amp.autocast": "precision-toggle", "torch.cpu.amp.autocast": "precision-toggle",
    "torch.set_default_dtype": "precision-toggle",
    "torch.set_default_tensor_type": "precision-toggle",
    "builtins.open": "file-or-socket", "os.open": "file-or-socket",
    "os.remove": "file-or-socket", "os.unlink": "file-or-socket",
    "os.rename": "file-or-socket", "os.replace": "file-or-socket",
    "os.rmdir": "file-or-socket", "os.removedirs": "file-or-socket",
    "os.mkdir": "file-or-socket", "os.makedirs": "file-or-socket",
    "os.write": "file-or-socket", "os.truncate": "file-or-socket",
    "os.chmod": "file-or-socket", "os.symlink": "file-or-socket", "os.link": "file-or-socket",
    "torch.save": "file-or-socket", "torch.load": "file-or-socket",
}
_PREFIX_RULES = (("os.exec", "threads-processes"), ("os.spawn", "threads-processes"))
# Attribute names that are a finding wherever they appear (frames, function internals).
_ATTR_RULES = {
    "f_back": "introspection", "f_globals": "introspection", "f_locals": "introspection",
    "f_builtins": "introspection", "tb_frame": "introspection", "gi_frame": "introspection",
    "__globals__": "introspection", "__subclasses__": "introspection",
    "__code__": "introspection", "__closure__": "introspection",
    "__builtins__": "introspection", "__dict__": None,
    "allow_tf32": "precision-toggle",
    "allow_fp16_reduced_precision_reduction": "precision-toggle",
    "allow_bf16_reduced_precision_reduction": "precision-toggle",
    "fp32_precision": "precision-toggle",
    "write_text": "file-or-socket", "write_bytes": "file-or-socket",
}
_PROTECTED_MODULES = ("torch", "triton", "time", "builtins", "sys", "os", "math", "numpy",
                      "random", "gc", "functools", "operator", "importlib", "json")
_BUILTINS = ("exec", "eval", "compile", "__import__", "open", "globals", "locals", "vars",
             "setattr", "delattr", "getattr", "breakpoint")
_TRITON_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics",
                      "triton.runtime.jit", "triton.runtime.autotune")
_LOAD_INLINE = ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")


def _resolve(node, aliases):
    """Dotted name of a Name/Attribute chain, the root resolved through imports
    (`tl.load` -> `triton.language.load`; a bare builtin `open` -> `builtins.open`)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = aliases.get(node.id)
    if root is None:
        root = "builtins." + node.id if node.id in _BUILTINS else node.id
    return ".".join([root] + parts[::-1])


def _root_name(node):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _Screen:
    def __init__(self, tree, backend):
        self.tree = tree
        self.backend = backend
        self.findings = []
        self.aliases = {}          # local name -> dotted module/object it was imported as
        self.imported_modules = set()
        self.functions = {}        # module-level function name -> FunctionDef
        self.classes = {}          # module-level class name -> ClassDef
        self.kernels = set()       # names of @triton.jit functions
        self.exts = set()          # names bound to load_inline(...) results
        self.ext_factories = set() # functions returning load_inline(...)
        self.ext_attrs = set()     # `self.X` attributes bound to an extension
        self.ext_callables = set() # names bound to an attribute of an extension
        self.module_assigned = set()

    def add(self, rule, node, what):
        line = getattr(node, "lineno", 0)
        detail = f"line {line}: {what}"[:MAX_DETAIL]
        key = (rule, detail)
        if key not in {(f["rule"], f["detail"]) for f in self.findings}:
            self.findings.append({"rule": rule, "severity": DEFAULT_POLICY[rule],
                                  "detail": detail})

    # -- collection ----------------------------------------------------------------------------

    def collect(self):
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
                    self.imported_modules.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.module_assigned.add(t.id)
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    if _resolve(target, self.aliases) in _TRITON_DECORATORS:
                        self.kernels.add(node.name)
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and self._is_load_inline(sub.value):
                        self.ext_factories.add(node.name)
        # Bindings, iterated to a fixed point: `ext = load_inline(...)`, `k = triton.jit(f)`,
        # `self.ext = ext`, `fn = ext.relu`.
        for _ in range(3):
            for node in ast.walk(self.tree):
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                v = node.value
                is_ext = self._is_load_inline(v) or self._is_ext(v)
                is_kernel = (isinstance(v, ast.Call)
                             and _resolve(v.func, self.aliases) in _TRITON_DECORATORS
                             ) or (isinstance(v, ast.Name) and v.id in self.kernels)
                is_ext_fn = isinstance(v, ast.Attribute) and self._is_ext(v.value)
                for t in targets:
                    if isinstance(t, ast.Name):
                        if is_ext:
                            self.exts.add(t.id)
                        if is_kernel:
                            self.kernels.add(t.id)
                        if is_ext_fn:
                            self.ext_callables.add(t.id)
                    elif isinstance(t, ast.Attribute) and _root_name(t) == "self":
                        if is_ext:
                            self.ext_attrs.add(t.attr)
                        if is_ext_fn:
                            self.ext_callables.add("self." + t.attr)
                        if is_kernel:
                            self.kernels.add("self." + t.attr)

    def _is_load_inline(self, node):
        return isinstance(node, ast.Call) and _resolve(node.func, self.aliases) in _LOAD_INLINE

    def _is_ext(self, node):
        if isinstance(node, ast.Name):
            return node.id in self.exts
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id == "self" and node.attr in self.ext_attrs
        if isinstance(node, ast.Call):
            return (isinstance(node.func, ast.Name) and node.func.id in self.ext_factories) \
                or self._is_load_inline(node)
        return False

    def _is_launch(self, node):
        """A kernel launch or an extension call: `k[grid](...)`, `ext.fn(...)`, `fn(...)`."""
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        if self.backend == "triton":
            if isinstance(f, ast.Subscript):
                name = f.value.id if isinstance(f.value, ast.Name) else (
                    "self." + f.value.attr if isinstance(f.value, ast.Attribute)
                    and _root_name(f.value) == "self" else None)
                return name in self.kernels
            return False
        if isinstance(f, ast.Attribute) and self._is_ext(f.value):
            return True
        if isinstance(f, ast.Name) and f.id in self.ext_callables:
            return True
        return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                and f.value.id == "self" and "self." + f.attr in self.ext_callables)

    # -- rules ---------------------------------------------------------------------------------

    def check_structure(self):
        model_new = self.classes.get("ModelNew")
        if model_new is None and "ModelNew" not in self.module_assigned:
            self.add("no-modelnew", self.tree, "no class ModelNew is defined at module level")
        defines_model = "Model" in self.classes or "Model" in self.module_assigned
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Name) and base.id == "Model":
                        self.add("reference-model-used", node,
                                 f"class {node.name} subclasses Model (the reference)")
            elif isinstance(node, ast.Name) and node.id == "Model" and not defines_model:
                self.add("reference-model-used", node, "uses the name Model (the reference)")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    "crucible_reference" in node.value or node.value == "reference"):
                self.add("reference-model-used", node,
                         f"names the reference module ({node.value[:40]!r})")
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.split(".")[0] in ("reference", "crucible_reference")):
                self.add("reference-model-used", node, f"imports from {node.module}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ("reference", "crucible_reference"):
                        self.add("reference-model-used", node, f"imports {a.name}")

        if not self.kernels and not self.exts and not self.ext_factories:
            what = ("no @triton.jit kernel is defined" if self.backend == "triton"
                    else "no load_inline(...) extension is built")
            self.add("no-kernel", self.tree, what)
            return
        if self.backend == "triton" and not self.kernels:
            self.add("no-kernel", self.tree, "backend triton but no @triton.jit kernel")
            return
        if self.backend == "cuda" and not (self.exts or self.ext_factories):
            self.add("no-kernel", self.tree, "backend cuda but no load_inline(...) extension")
            return
        forward = None
        if model_new is not None:
            forward = next((b for b in model_new.body if isinstance(b, ast.FunctionDef)
                            and b.name == "forward"), None)
        if forward is None:
            if model_new is not None:
                self.add("kernel-not-called", model_new, "ModelNew defines no forward")
            return
        if not self._reaches_launch(forward, model_new, depth=0, seen=set()):
            self.add("kernel-not-called", forward,
                     "ModelNew.forward launches no kernel (directly or through helpers)")

    def _methods(self, cls):
        return {b.name: b for b in cls.body if isinstance(b, ast.FunctionDef)}

    def _reaches_launch(self, fn, cls, depth, seen):
        if id(fn) in seen or depth > 4:
            return False
        seen.add(id(fn))
        for node in ast.walk(fn):
            if self._is_launch(node):
                return True
            if not isinstance(node, ast.Call):
                continue
            callees = []
            f = node.func
            if isinstance(f, ast.Name):
                if f.id in self.functions:
                    callees.append((self.functions[f.id], None))
                elif f.id in self.classes:   # instantiating a local helper class
                    c = self.classes[f.id]
                    callees += [(m, c) for m in self._methods(c).values()]
            elif isinstance(f, ast.Attribute):
                owner = f.value
                if isinstance(owner, ast.Name) and owner.id in self.classes:
                    c = self.classes[owner.id]      # Helper.apply(...) / Helper.method(...)
                    callees += [(m, c) for m in self._methods(c).values()
                                if m.name in ("forward", f.attr)]
                else:
                    for c in self.classes.values():   # self.method(...), obj.method(...)
                        m = self._methods(c).get(f.attr)
                        if m is not None:
                            callees.append((m, c))
                if (isinstance(owner, ast.Name) and owner.id == "self" and cls is not None):
                    # self.sub(...) where self.sub = LocalModule(...): its forward.
                    callees += self._submodule_forwards(cls, f.attr)
            for callee, c in callees:
                if self._reaches_launch(callee, c, depth + 1, seen):
                    return True
        # self.sub(x) calls written as attribute calls on self without `.forward`.
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and _root_name(node.func) == "self" and cls is not None):
                for callee, c in self._submodule_forwards(cls, node.func.attr):
                    if self._reaches_launch(callee, c, depth + 1, seen):
                        return True
        return False

    def _submodule_forwards(self, cls, attr):
        out = []
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name) \
                    and node.value.func.id in self.classes:
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and t.attr == attr:
                        c = self.classes[node.value.func.id]
                        m = self._methods(c).get("forward")
                        if m is not None:
                            out.append((m, c))
        return out

    def check_try(self):
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Try) or not node.handlers:
                continue
            body_launch = any(self._is_launch(n) for s in node.body for n in ast.walk(s))
            fallback = any(
                isinstance(n, ast.Call) and (_resolve(n.func, self.aliases) or "").startswith(
                    ("torch.", "F.")) for h in node.handlers for n in ast.walk(h))
            handler_returns = any(isinstance(n, ast.Return) for h in node.handlers
                                  for n in ast.walk(h))
            if body_launch or fallback or handler_returns:
                self.add("try-except-fallback", node,
                         "try/except around a kernel launch or with a fallback in the handler")
            else:
                self.add("try-except", node, "try/except")

    def check_names(self):
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] + [f"{node.module}.{a.name}"
                                                     for a in node.names])
                for name in names:
                    for prefix, rule in _IMPORT_RULES.items():
                        if rule and (name == prefix or name.startswith(prefix + ".")):
                            self.add(rule, node, f"imports {name}")
                    full = name
                    rule = _NAME_RULES.get(full) or next(
                        (r for p, r in _PREFIX_RULES if full.startswith(p)), None)
                    if rule:
                        self.add(rule, node, f"imports {full}")
            elif isinstance(node, (ast.Attribute, ast.Name)):
                if isinstance(node, ast.Attribute):
                    rule = _ATTR_RULES.get(node.attr)
                    if rule:
                        self.add(rule, node, f"uses .{node.attr}")
                name = _resolve(node, self.aliases)
                if name is None:
                    continue
                if isinstance(node, ast.Name) and name.startswith("builtins.") and (
                        node.id in self.functions or node.id in self.module_assigned):
                    continue   # the candidate's own `compile`, `open`, ...
                rule = _NAME_RULES.get(name) or next(
                    (r for p, r in _PREFIX_RULES if name.startswith(p)), None)
                if rule:
                    self.add(rule, node, f"uses {name}")
                elif name in ("builtins.setattr", "builtins.delattr"):
                    pass   # judged at the call (check_assignments)
            elif isinstance(node, ast.Subscript):
                name = _resolve(node.value, self.aliases)
                if name in ("sys.modules",):
                    self.add("introspection", node, "indexes sys.modules")

    def check_assignments(self):
        modules = {n for n, full in self.aliases.items()
                   if full.split(".")[0] in _PROTECTED_MODULES}
        modules |= {"builtins", "__builtins__"}
        for node in ast.walk(self.tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for t in targets:
                for sub in ast.walk(t):
                    if not isinstance(sub, (ast.Attribute, ast.Subscript)):
                        continue
                    root = _root_name(sub)
                    if root in modules:
                        name = _resolve(sub, self.aliases) if isinstance(
                            sub, ast.Attribute) else root
                        if isinstance(sub, ast.Attribute) and _ATTR_RULES.get(
                                sub.attr) == "precision-toggle":
                            break   # reported as precision-toggle, not as this
                        self.add("module-attribute-assignment", node,
                                 f"assigns to {name or root}")
                    break
            if isinstance(node, ast.Call):
                fname = _resolve(node.func, self.aliases)
                if fname in ("builtins.setattr", "builtins.delattr") and node.args:
                    root = _root_name(node.args[0])
                    if root in modules or root is None:
                        self.add("module-attribute-assignment", node,
                                 f"{fname.split('.')[1]}() on {root or 'an expression'}")
                    else:
                        self.add("introspection", node, f"{fname.split('.')[1]}() call")
                elif fname == "builtins.getattr" and len(node.args) >= 2 and not isinstance(
                        node.args[1], ast.Constant):
                    self.add("introspection", node, "getattr() with a computed name")


def screen(source, backend):
    """All findings for `source` (a candidate) with their default severities."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    s = _Screen(tree, backend)
    s.collect()
    s.check_structure()
    s.check_try()
    s.check_names()
    s.check_assignments()
    return s.findings[:MAX_FINDINGS]


def apply_policy(findings, overrides):
    """Severities per `overrides` ({rule: reject|flag|off}); `off` drops the finding."""
    out = []
    for f in findings:
        sev = (overrides or {}).get(f["rule"], f["severity"])
        if sev == OFF:
            continue
        out.append(dict(f, severity=sev))
    return out
