"""The judge's loading stages: `load_reference` (and the footprint it reports before the
worker lets the task go), `load_candidate` (syntax check, static screening, then the runner
imports the candidate) and `instantiate`.

Owns: LoadStage, a part of Evaluation.

May import: trusted, errors, channel, tensors, screen, builds, integrity, memory.
"""
import base64
import os
import pickle
import sys
import traceback

import crucible_memory as memory
import crucible_screen as screen
from crucible_builds import REFERENCE_MODULE, import_file
from crucible_channel import emit, gated
from crucible_errors import CAUGHT, MAX_ERROR_CHARS, SetupError, Verdict
from crucible_integrity import MAX_FLAG_CHARS, MAX_FLAGS
from crucible_tensors import as_call_args, deep_clone, model_to_precision, seed_all, to_device
from crucible_trusted import Trusted


class LoadStage:
    """Evaluation's load_reference, load_candidate and instantiate stages."""

    def load_reference(self):
        """Import reference.py, then remove the file: the candidate's process never finds the
        reference on disk. Any failure is the problem's fault: REFERENCE."""
        try:
            self.ref = import_file(REFERENCE_MODULE, self.ref_path)
        except CAUGHT as e:
            self.reference_failed(e, "reference.py failed to import")
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs")
                   if not callable(getattr(self.ref, n, None))]
        if missing:
            raise Verdict("REFERENCE", f"reference.py does not define {', '.join(missing)}")
        self.Model = self.ref.Model
        self.get_inputs = self.ref.get_inputs
        self.get_init_inputs = self.ref.get_init_inputs
        if self.runner is not None:
            try:
                os.unlink(self.ref_path)
            except OSError:
                pass
        dev = self.device
        seed = self.spec.seed
        try:
            seed_all(seed, dev)
            self.init_inputs = as_call_args(self.get_init_inputs())
            seed_all(seed, dev)
            ref_model = self.Model(*deep_clone(to_device(self.init_inputs, dev)))
            self.ref_model = model_to_precision(ref_model.to(dev), self.spec.precision).eval()
            self.sync()
        except CAUGHT as e:
            self.reference_failed(e, "reference model failed to build")

    def report_footprint(self):
        """Tells the worker, before it lets this task go, the peak bytes its tensors will
        take on the GPU (memory.py): the worker lets children go only while their footprints
        fit the device. Trusted code only has run so far. Without a gate or a GPU, or when
        the reference cannot be sized, nothing is sent (the worker then assumes a slot's
        share of the device)."""
        if self.device != "cuda" or not gated():
            return
        torch = Trusted.torch
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        nbytes, how = memory.measure(self.ref, self.init_inputs, self.ref_model,
                                     self.spec.seed, self.spec.precision, total)
        if how:
            sys.stderr.write(f"crucible harness: footprint: {how}\n")
        if nbytes is not None:
            emit({"event": "footprint", "bytes": int(nbytes)})

    def load_candidate(self):
        """compile() first, so invalid Python is SYNTAX and never runs; screening; then the
        runner imports it. Exceptions at import are IMPORT, unless they are build failures
        (load_inline at module level is the usual CUDA pattern): COMPILATION."""
        source = self.check_source()
        self.screen(source)
        self.candidate_loaded = True
        reply = self.ask("import")
        if reply.get("builds_reused"):
            self.result["builds_reused"] = int(reply["builds_reused"])

    def check_source(self):
        try:
            with open(self.cand_path, "rb") as f:
                source = f.read()
            compile(source, self.cand_path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:   # ValueError: null bytes in the source
            text = "".join(traceback.format_exception_only(type(e), e))
            text = text.replace(self.taskdir.rstrip(os.sep) + os.sep, "")
            raise Verdict("SYNTAX", text[:MAX_ERROR_CHARS].rstrip("\n"), compiled=False)
        except OSError as e:
            raise SetupError(f"cannot read candidate.py: {e}")
        return source

    def screen(self, source):
        """Static screening (screen.py) before the candidate is imported: every finding goes
        into `flags`; any finding whose rule the policy rejects is the verdict SCREENED."""
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError:
            text = source.decode("utf-8", "replace")
        findings = screen.apply_policy(screen.screen(text, self.spec.backend),
                                        self.spec.screening)
        flags = [{k: str(f[k])[:MAX_FLAG_CHARS] for k in ("rule", "severity", "detail")}
                 for f in findings[:MAX_FLAGS]]
        self.result["flags"] = flags
        rejects = [f for f in flags if f["severity"] == "reject"]
        if rejects:
            lines = [f"{f['rule']}: {f['detail']}" for f in rejects]
            raise Verdict("SCREENED", "rejected by static screening: " + "; ".join(lines)[
                :MAX_ERROR_CHARS], compiled=False)

    def instantiate(self):
        """The runner seeds, builds ModelNew(*init inputs) the way the judge built Model (same
        parameters when ModelNew creates them in the same order), on the device, eval mode."""
        self.ask("instantiate", seed=self.spec.seed, precision=self.spec.precision,
                 init=base64.b64encode(pickle.dumps(self.init_inputs)).decode("ascii"))
        # Imported and instantiated; for Triton the kernels still have to compile at the first
        # call (a compile error there turns this back to False).
        self.compiled = True
