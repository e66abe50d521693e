"""Scripted completions for the GPU episode run: from one correct Triton candidate of a
KernelBench problem, the three turns of a refinement episode a model might write: a kernel
that runs but answers wrong, one whose Triton kernel does not compile, and the correct one.
Each is wrapped as a completion in the format the prompts ask for (<KERNEL> + a fence)."""
import ast
import re

WRONG_TAIL = '''

class ModelNew(nn.Module):
    """The kernel's module with its answer shifted: runs, compiles, and is wrong."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = _KernelModel(*args, **kwargs)

    def forward(self, *args):
        # Off by 0.5·y + 1 everywhere but y = -2: beyond any tolerance near KernelBench's
        # (a shift toward 0.5, tried first, passed the mean of uniform inputs, which is ~0.5).
        return self.inner(*args) * 1.5 + 1.0
'''

_SIGNATURE_END = re.compile(r"\)\s*(->[^:]*)?:\s*(#.*)?$")


def wrong(source: str) -> str:
    """The candidate with its outputs changed after its own kernels ran: its class renamed
    (`super(ModelNew, self)` included) and wrapped by a ModelNew that shifts the answer."""
    renamed = re.sub(r"\bModelNew\b", "_KernelModel", source)
    return renamed.rstrip() + "\n" + WRONG_TAIL


def uncompilable(source: str) -> str:
    """The candidate whose first @triton.jit kernel calls a function that does not exist:
    Triton fails to compile it at the first launch (verdict error, code COMPILATION)."""
    lines = source.splitlines()
    at = next(i for i, l in enumerate(lines) if l.strip().startswith("@triton.jit"))
    end = next(i for i in range(at + 1, len(lines)) if _SIGNATURE_END.search(lines[i]))
    body = next(l for l in lines[end + 1 :] if l.strip() and not l.strip().startswith("#"))
    indent = body[: len(body) - len(body.lstrip())]
    lines.insert(end + 1, f"{indent}_never_defined_op(0)  # noqa: F821 -- the scripted compile error")
    return "\n".join(lines) + "\n"


def completion(source: str, note: str) -> str:
    return f"<think>{note}</think>\n<KERNEL>\n```python\n{source.rstrip()}\n```\n"


def turns(source: str) -> list[str]:
    """The three scripted completions, each checked to be Python that parses."""
    out = [
        completion(wrong(source), "first try"),
        completion(uncompilable(source), "rewrite the kernel"),
        completion(source, "fix the name and the epilogue"),
    ]
    for text in out:
        ast.parse(text.split("```python\n", 1)[1].rsplit("```", 1)[0])
    return out
