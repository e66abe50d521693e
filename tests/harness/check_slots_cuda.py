"""The timing check's packed slots across two processes on a GPU (transport.Exporter.export_packed
in the exporter, import_tensor with a storage cache in the importer): every view the importer
maps is the exporter's, at its own place (the importer writes each view's index, the exporter
reads them back), for a batch shaped like the timing check's (256 sets of an input and an
output, channels-last and transposed views among them). Prints what the export and the mapping
took, packed and one export per slot, for docs/BENCHMARKS.md (figures, not asserts).

Needs CUDA: run on the GPU machine (scripts/gpu-smoke.sh runs it); exits 0 with a note when
there is no GPU. Exit 1 on the first failure."""
import importlib.util
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import torch  # noqa: E402

import crucible_transport as transport  # noqa: E402

SETS = 256


def child():
    """The importer: maps every description it is sent, writes each view's index into it."""
    descs = json.loads(sys.stdin.readline())["descs"]
    packed = json.loads(sys.stdin.readline())["packed"]
    torch.cuda.init()
    storages = {} if packed else None
    t0 = time.perf_counter()
    views = [transport.import_tensor(torch, d, "/nonexistent", 0, shared=True, storages=storages)
             for d in descs]
    mapped_ms = (time.perf_counter() - t0) * 1e3
    for i, v in enumerate(views):
        if v.numel():
            v.fill_(i % 100 if v.dtype != torch.bool else bool(i % 2))
    torch.cuda.synchronize()
    print(json.dumps({"mapped_ms": mapped_ms, "storages": len(storages or {})}), flush=True)
    sys.stdin.readline()   # the exporter has read them back


def templates():
    shapes = []
    for i in range(SETS):
        x = torch.empty(64, 33, device="meta")
        if i % 3 == 1:
            x = torch.empty(2, 3, 4, 4, device="meta").to(memory_format=torch.channels_last)
        elif i % 3 == 2:
            x = torch.empty(16, 8, device="meta").t()
        shapes += [torch.empty_like(x), torch.empty(64, dtype=torch.float16, device="meta")]
    shapes.append(torch.empty(0, 5, device="meta"))
    shapes.append(torch.empty(7, dtype=torch.bool, device="meta"))
    return shapes


def run(packed):
    like = templates()
    exporter = transport.Exporter(torch, "/nonexistent", "x")
    pool = torch.cuda.MemPool()
    t0 = time.perf_counter()
    with torch.cuda.use_mem_pool(pool):
        if packed:
            descs, views = exporter.export_packed(like, 0)
        else:
            views = [torch.empty_like(t, device="cuda") for t in like]
            descs = [exporter.export(v)[0] for v in views]
    exported_ms = (time.perf_counter() - t0) * 1e3
    for v in views:
        v.zero_()
    torch.cuda.synchronize()
    proc = subprocess.Popen([sys.executable, __file__, "--child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps({"descs": descs}) + "\n" + json.dumps({"packed": packed}) + "\n")
    proc.stdin.flush()
    report = json.loads(proc.stdout.readline())
    torch.cuda.synchronize()
    for i, (t, v) in enumerate(zip(like, views)):
        assert v.shape == t.shape and v.stride() == t.stride() and v.dtype == t.dtype, i
        want = torch.full_like(v, i % 100 if v.dtype != torch.bool else bool(i % 2))
        assert torch.equal(v, want), f"view {i} does not hold what the importer wrote"
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=60) == 0
    if packed:
        assert report["storages"] == 1, report
    return exported_ms, report["mapped_ms"]


def main():
    if not torch.cuda.is_available():
        print("slots (CUDA): no GPU here, nothing checked")
        return
    torch.cuda.init()
    rows = []
    for packed in (False, True, False, True):
        rows.append((packed, *run(packed)))
    print(f"slots (CUDA): {2 * SETS + 2} views across two processes, each at its own place")
    for packed, exported, mapped in rows:
        print(f"  {'packed (one export)' if packed else 'one export per slot':>22}: "
              f"export {exported:7.1f} ms, mapping {mapped:7.1f} ms")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        main()
