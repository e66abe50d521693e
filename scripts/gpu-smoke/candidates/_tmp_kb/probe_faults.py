# temporary GPU probe for the fault candidates (run each in a fresh process)
import os, subprocess, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
CAND = os.path.join(HERE, "..")
child = r'''
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
try:
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
except Exception as e:
    print("IMPORT/BUILD ERROR:", type(e).__name__, str(e)[-300:]); sys.exit(0)
torch.manual_seed(0)
x = torch.rand(4096, 8192, device="cuda")
m = mod.ModelNew().cuda()
try:
    y = m(x)
    torch.cuda.synchronize()
    print("returned; correct =", torch.allclose(y, torch.relu(x), atol=1e-2, rtol=1e-2))
except Exception as e:
    print("FORWARD ERROR:", type(e).__name__, str(e)[:300].replace("\n", " | "))
'''
for name in ["illegal_memory_access.py", "cuda_illegal_address.py", "wrong.py",
             "triton_compile_error.py", "cuda_compile_error.py", "hang_kernel.py", "python_hang.py"]:
    t = time.time()
    try:
        r = subprocess.run([sys.executable, "-c", child, os.path.join(CAND, "faults", name)],
                           capture_output=True, text=True, timeout=45)
        out = (r.stdout.strip().splitlines() or [""])[-1]
        print(f"{name}: rc={r.returncode} {time.time()-t:.1f}s :: {out} :: stderr tail: {r.stderr.strip()[-200:]!r}", flush=True)
    except subprocess.TimeoutExpired:
        print(f"{name}: TIMEOUT after {time.time()-t:.1f}s", flush=True)
