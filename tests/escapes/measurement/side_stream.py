"""A correct kernel whose process keeps ~0.5 s of matmuls queued on a side stream from a
background thread: GPU work that goes on running while the runner is stopped at the gate, so a
neighbour's timing (and a reference timing to be cached) would absorb it. GPU only."""
import builtins
import time

NAME = "side_stream"
_imp = builtins.__dict__["__imp" + "ort__"]


def setup(model):
    torch = _imp("torch")
    threads = _imp("thre" + "ading")
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def keep_busy():
        marks = []
        while True:
            with torch.cuda.stream(side):
                for _ in range(25):
                    a @ a
                mark = torch.cuda.Event()
                mark.record(side)
            marks.append(mark)
            # About 0.5 s queued: wait for the oldest batch once eight are in flight.
            while len(marks) > 8:
                if marks[0].query():
                    marks.pop(0)
                else:
                    time.sleep(0.005)

    threads.Thread(target=keep_busy, daemon=True).start()
    return "side-stream matmuls started"


def forward(model, x, compute):
    return compute(x)
