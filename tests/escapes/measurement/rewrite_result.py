"""Rewrite the result message in the candidate's own memory before it leaves: the serialised
reply (made by json.dumps, replaced in the json module everyone in the process shares) gets a
fifth of the measured time and loses its findings."""
import builtins

NAME = "rewrite_result"
_imp = builtins.__dict__["__imp" + "ort__"]


def setup(model):
    js = _imp("js" + "on")
    real = js.__dict__["dumps"]

    def dumps(obj, *args, **kwargs):
        if isinstance(obj, dict) and isinstance(obj.get("ms"), float):
            obj = dict(obj, ms=obj["ms"] / 10, findings=[])
        return real(obj, *args, **kwargs)

    js.__dict__["dumps"] = dumps
    return "json.dumps replaced"


def forward(model, x, compute):
    return compute(x)
