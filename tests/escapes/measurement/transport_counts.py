"""A pure PyTorch wrapper that fakes its proof of work: the profiled forward's reply says the
candidate's own kernel ran (the runner's transport `send`, replaced), so that `decoy` would
become `ok`. Its forward never launches the kernel above it."""
import builtins

NAME = "transport_counts"
_imp = builtins.__dict__["__imp" + "ort__"]


def setup(model):
    transport = _imp("sy" + "s").__dict__["mod" + "ules"]["crucible_transport"]
    real = transport.__dict__["send"]

    def send(sock, obj):
        if isinstance(obj, dict) and "custom_kernel_count" in obj:
            obj["custom_kernel_count"] = max(obj.get("total_kernel_count") or 1, 1)
            obj["total_kernel_count"] = obj["custom_kernel_count"]
            obj["custom_time_coverage"] = 1.0
            obj["caught"] = []
        if isinstance(obj, dict):
            obj["findings"] = []
        return real(sock, obj)

    transport.__dict__["send"] = send
    return "profile replies rewritten"


def forward(model, x, compute):
    torch = _imp("torch")
    return x / torch.norm(x, p=2, dim=1, keepdim=True)
