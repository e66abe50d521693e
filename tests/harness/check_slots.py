"""The timed calls' output slots (gpu-worker/harness/transport.py: copy_into_slots, from_slots;
judge_performance.py: poison_slots; judge_verify.py: set_signature), on the CPU: an output of
the reference's shapes and dtypes is copied and its container named, anything else is left to
be described as it is; a kind no honest runner sends is refused; poisoned slots differ from the
expected output everywhere;
the timing check reuses its shared slots only for sets of the same signature.
Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import torch  # noqa: E402

import crucible_transport as transport  # noqa: E402
from crucible_judge_performance import poison_slots  # noqa: E402
from crucible_judge_verify import set_signature  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402

capture_trusted(torch)
checks = 0


def check(cond, what):
    global checks
    assert cond, what
    checks += 1


def slots_like(*tensors):
    return [torch.empty_like(t) for t in tensors]


a, b = torch.randn(4, 5), torch.randn(3)
one = slots_like(a)
check(transport.copy_into_slots(torch, a, one) == "tensor" and torch.equal(one[0], a),
      "a tensor of the slot's shape is copied")
two = slots_like(a, b)
check(transport.copy_into_slots(torch, (a, b), two) == "tuple"
      and torch.equal(two[0], a) and torch.equal(two[1], b), "a tuple of tensors")
check(transport.copy_into_slots(torch, [a, b], two) == "list", "a list keeps its kind")
for name, out, slots in (
        ("another shape", a.t(), one),
        ("another dtype", a.double(), one),
        ("fewer tensors", (a,), two),
        ("a non-tensor in the tuple", (a, 3), two),
        ("not a tensor at all", 3.0, one),
        ("no slots", a, [])):
    before = [s.clone() for s in slots]
    check(transport.copy_into_slots(torch, out, slots) is None, f"{name}: not copied")
    check(all(torch.equal(s, t) for s, t in zip(slots, before)), f"{name}: slots untouched")

check(transport.from_slots("tensor", one) is one[0], "a tensor is the slot itself")
check(transport.from_slots("tuple", two) == tuple(two), "a tuple of the slots")
check(isinstance(transport.from_slots("list", two), list), "a list")
for bad, slots in (("dict", one), ("tensor", two), (None, one), (["tensor"], one)):
    try:
        transport.from_slots(bad, slots)
        check(False, f"kind {bad!r} with {len(slots)} slots accepted")
    except transport.TransportError:
        check(True, "refused")

expected = [torch.randn(6), torch.randint(-5, 5, (6,)), torch.tensor([True, False, True]),
            torch.randint(0, 256, (6,), dtype=torch.uint8), torch.randn(2, dtype=torch.complex64)]
slots = [e.clone() for e in expected]   # as a runner that wrote the right answer last time left them
poison_slots(slots, expected)
for s, e in zip(slots, expected):
    differs = s != e if not (s.is_floating_point() or s.is_complex()) else ~torch.isclose(
        s, e, equal_nan=False)
    check(bool(differs.all()), f"{e.dtype}: every element of a poisoned slot differs")

# The timing check's slots are reused by a batch only when its sets fit them exactly.
x, y = torch.randn(4, 5), torch.randn(4, 5)
same = set_signature(([x, 3], [y]))
check(set_signature(([torch.randn(4, 5), 3], [torch.randn(4, 5)])) == same,
      "fresh content of the same shapes, dtypes and values: the same signature")
for other, what in [(([torch.randn(4, 6), 3], [y]), "an input's shape"),
                    (([x.double(), 3], [y]), "an input's dtype"),
                    (([x, 4], [y]), "a value sent by value"),
                    (([x, 3], [y.half()]), "an output's dtype"),
                    (([x, 3], [y, y]), "the number of outputs")]:
    check(set_signature(other) != same, f"{what} changes the signature")

# The timing check's slots packed into one allocation (transport.pack_layout, packed_views):
# each view shaped, strided and typed as empty_like makes it, aligned, none overlapping.
templates = [torch.randn(3, 5), torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last),
             torch.zeros(0, 7), torch.randn(7).half(), torch.ones(3, dtype=torch.bool),
             torch.arange(5, dtype=torch.int64), torch.randn(4, 4).t()]
like = [torch.empty_like(t, device="meta") for t in templates]
starts, total = transport.pack_layout(like)
check(all(st % transport.PACK_ALIGN == 0 for st in starts), "every view starts aligned")
check(starts == sorted(starts) and total >= starts[-1], "in order, inside the allocation")
packed = transport.packed_views(torch, torch.empty(total, dtype=torch.uint8), like, starts)
for t, v in zip(templates, packed):
    check(v.shape == t.shape and v.dtype == t.dtype and v.stride() == torch.empty_like(t).stride(),
          f"a view like empty_like({tuple(t.shape)}, {t.dtype})")
for i, v in enumerate(packed):
    if v.numel():
        v.copy_(templates[i])
check(all(torch.equal(v, t) for v, t in zip(packed, templates)),
      "written one after another, every view keeps its own content (no overlap)")
check(transport.pack_layout([]) == ([], 0), "nothing to pack")

print(f"slots: {checks} checks passed")
