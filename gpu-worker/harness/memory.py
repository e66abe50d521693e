"""How much device memory an evaluation's tensors take, known before the candidate runs.

Children that share a GPU share its memory. KernelBench's level-1 inputs are large (a
4096x393216 float32 tensor is 6 GiB) and the judge and the runner each hold copies, so a few
children at once can run the card out of memory, and a child that fails for want of memory
its neighbours held says nothing about its candidate. The judge therefore tells the worker,
before it is let go, how much its tensors will take at their peak (the `footprint` line); the
worker lets a child go only while the footprints of the children at work fit the device
(worker/pipeline.rs). The sizes come from the meta device: the reference's `get_inputs()` and
forward run on shapes alone, so nothing is allocated and no kernel runs.

The estimate follows the copies the stages make (judge_correctness.py, judge_performance.py).
Timing holds the most: the pool of input sets with their reference outputs in the judge, the
runner's input slot and the candidate's output, and the judge's output slot the runner copies
that output into: (sets + 1) x (inputs + outputs) + outputs; or, after it,
the timing check's fresh sets, each twice with its output twice (verify_sets). A correctness
trial holds less (the inputs, the reference's copy of them, the runner's copy and the
reference output in the judge, the candidate's output in the runner: 3 inputs + 2 outputs, at
most that with two sets), and the judge empties its cache between the two for large sets. The
model's parameters count twice (the reference in the judge, the candidate in the runner).
A request in fp16 or bf16 makes each input set as the problem writes it and then casts it, so
while a set is made its inputs exist in both dtypes: the inputs as written count once more.
What is not counted (the candidate's and the reference's intermediates, the allocators'
rounding) is why the worker keeps headroom and why a shortage beside neighbours is still
retried alone (worker/neighbours.rs). The CUDA contexts are the worker's constant.

Owns: the timing pool's size (pool_sets, also used by judge_performance.py), how many of the
timing check's sets fit (verify_sets), the estimate
(footprint_bytes), the reference's inputs on the meta device (meta_inputs, also the CPU
stage's Triton dry run's first step), the measurement (measure), and the runner's poisoning
of the allocator's free memory (poison_free_memory).
May import: trusted, tensors.
"""
from crucible_tensors import as_call_args, model_to_precision, seed_all, tensor_nbytes, to_precision
from crucible_trusted import Trusted

TIMING_POOL_MAX = 3          # distinct input sets the timed calls rotate through
TIMING_POOL_MIN = 2          # ... at least (a result kept from the previous call is then stale)
TIMING_POOL_MEMORY = 0.35    # at most this share of device memory for the timing pool
# The timing check's batch (timing_check.py): fresh input sets, each held twice (the judge's
# and the shared slot the runner reads) with its output twice (the reference's and the slot
# the runner writes), after the timing pool is gone.
VERIFY_MAX_SETS = 256
VERIFY_MEMORY = 0.15         # at most this share of device memory for them
VERIFY_MEMORY_CPU = 256 << 20


def verify_sets(inputs_bytes, outputs_bytes, total_bytes):
    """Pure: how many of the timing check's fresh sets fit its memory (at least 1: one set is
    never more than the timing pool held), for a device of `total_bytes` (None: the CPU)."""
    budget = VERIFY_MEMORY_CPU if total_bytes is None else total_bytes * VERIFY_MEMORY
    per_set = 2 * (inputs_bytes + outputs_bytes)
    return max(1, min(VERIFY_MAX_SETS, int(budget // max(per_set, 1))))


def pool_sets(per_set_bytes, total_bytes):
    """Pure: the timing pool's input sets for sets of `per_set_bytes` (inputs + reference
    output) on a device of `total_bytes`: as many as fit TIMING_POOL_MEMORY of it, from
    TIMING_POOL_MIN to TIMING_POOL_MAX."""
    budget = total_bytes * TIMING_POOL_MEMORY
    return max(TIMING_POOL_MIN, min(TIMING_POOL_MAX, int(budget // max(per_set_bytes, 1))))


def footprint_bytes(inputs, outputs, params, total_bytes):
    """Pure: the peak bytes of an evaluation's tensors (judge and runner together) whose
    inputs take `inputs` bytes, reference outputs `outputs`, model parameters and buffers
    `params`, on a device of `total_bytes` (see the module's comment for the copies)."""
    per_set = inputs + outputs
    # The pool's sets, the runner's input slot and the candidate's output, and the judge's
    # output slot the runner copies it into.
    timing = (pool_sets(per_set, total_bytes) + 1) * per_set + outputs
    check = verify_sets(inputs, outputs, total_bytes) * 2 * per_set
    return 2 * params + max(timing, check)


def poison_free_memory():
    """Fills the device memory the caching allocator holds but no tensor uses with NaN bytes,
    so that an output that is never written reads garbage instead of an earlier result (the
    runner does it before a correctness trial's forward)."""
    torch = Trusted.torch
    sizes = []
    for segment in torch.cuda.memory_snapshot():
        for block in segment.get("blocks", []):
            if block.get("state") == "inactive" and block.get("size", 0) > 0:
                sizes.append(block["size"])
    held = []
    for size in sorted(sizes, reverse=True):
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        t.fill_(0xFF)
        held.append(t)
    del held


def meta_inputs(ref, seed, precision):
    """The reference module `ref`'s get_inputs() under `seed` with meta as the default device,
    cast to `precision`: shapes, strides and dtypes without memory (a get_inputs() that names
    its device still makes real tensors). Raises what get_inputs() raises."""
    torch = Trusted.torch
    seed_all(seed, "cpu")
    with torch.device("meta"):
        return to_precision(as_call_args(ref.get_inputs()), precision)


def measure(ref, init_inputs, ref_model, seed, precision, total_bytes):
    """The footprint of the task whose reference module is `ref` (its model built from
    `init_inputs` as `ref_model`), from meta tensors: the inputs get_inputs() makes under
    `seed` and the output of a meta copy of the model. Returns (bytes, how): `how` says what
    was guessed when the reference cannot run on meta (an output as large as the inputs), or
    None; (None, why) when not even the inputs could be sized."""
    torch = Trusted.torch
    params = sum(tensor_nbytes(list(x)) for x in (ref_model.parameters(), ref_model.buffers()))
    try:
        written = meta_inputs(ref, seed, "fp32")
    except Exception as e:   # the reference's code
        return None, f"get_inputs() on the meta device: {type(e).__name__}"
    inputs = to_precision(written, precision)
    in_bytes = tensor_nbytes(inputs)
    # While a set is cast, its inputs as written exist too (nothing when no cast changed them).
    written_bytes = tensor_nbytes(written)
    transient = written_bytes if written_bytes != in_bytes else 0
    how = None
    if any(isinstance(x, torch.Tensor) and x.device.type != "meta" for x in inputs):
        # get_inputs() names its device: its tensors are real, the model on meta cannot
        # take them.
        return footprint_bytes(in_bytes, in_bytes, params, total_bytes) + transient, \
            "output sized as the inputs (get_inputs() names a device)"
    try:
        with torch.device("meta"), torch.no_grad():
            out = model_to_precision(ref.Model(*init_inputs), precision)(*inputs)
        out_bytes = tensor_nbytes(out if isinstance(out, (list, tuple)) else [out])
    except Exception as e:   # the reference's code, or an op without a meta kernel
        out_bytes = in_bytes
        how = f"output sized as the inputs (forward on meta: {type(e).__name__})"
    return footprint_bytes(in_bytes, out_bytes, params, total_bytes) + transient, how
