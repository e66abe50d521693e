"""Messages and tensors between the judge and the runner (the candidate's process).

The judge (judge.py: the task's main process) holds the secret input seeds, the reference
outputs and the comparison; the runner imports and runs the candidate. They talk over a Unix
stream socket in frames: 4-byte big-endian length, then a JSON object. Tensors never travel by
value over the socket and are never pickled (the judge must not unpickle what the candidate's
process sends):

* CUDA tensors are shared in place with CUDA IPC: the exporter's storage handle, and the
  importer maps that allocation. The judge exports the inputs from a memory pool of their own
  (so the runner maps inputs and nothing else of the judge's) and maps the runner's outputs.
  Many slots at once (the timing check's) are views of one allocation exported once.
* Inputs that are not tensors go from the judge to the runner pickled (value_description);
  nothing the runner sends is ever unpickled.
* CPU tensors go through files in the transfer directory, mapped shared by the runner so
  that what it writes into an input is there for the judge to see.

Everything the judge imports is checked here first: known dtype, sane shape and strides, the
view inside its storage, a regular file (no symlink) of the right size.

May import: the standard library only (no harness module); the judge and the runner import it.
"""
import base64
import json
import os
import pickle
import stat
import struct

MAX_FRAME = 16 << 20
MAX_DIMS = 16
MAX_ELEMENTS = 1 << 36
# Where the views of one packed allocation start (bytes): a multiple of every dtype's size.
PACK_ALIGN = 256
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
          "uint8", "bool", "complex64", "complex128")


class TransportError(Exception):
    """A malformed message or tensor description: the peer broke the protocol."""


class PeerGone(Exception):
    """The other process closed its end (exited or was killed)."""


# ---------------------------------------------------------------------------------------------
# Framing
# ---------------------------------------------------------------------------------------------

def send(sock, obj):
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_FRAME:
        raise TransportError(f"message of {len(data)} bytes exceeds {MAX_FRAME}")
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise PeerGone()
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock):
    (length,) = struct.unpack(">I", _recv_exact(sock, 4))
    if length > MAX_FRAME:
        raise TransportError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    try:
        obj = json.loads(_recv_exact(sock, length))
    except ValueError as e:
        raise TransportError(f"unreadable frame: {e}")
    if not isinstance(obj, dict):
        raise TransportError("frame is not an object")
    return obj


# ---------------------------------------------------------------------------------------------
# Tensor descriptions
# ---------------------------------------------------------------------------------------------

def _b64(data):
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text, what, limit=256):
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > limit * 2:
        raise TransportError(f"bad {what}")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError:
        raise TransportError(f"bad {what}")


def _dtype_name(torch, dtype):
    name = str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise TransportError(f"dtype {dtype} cannot be transferred")
    return name


def _int(value, what, low=0, high=MAX_ELEMENTS * 16):
    if type(value) is not int or not low <= value <= high:
        raise TransportError(f"bad {what}: {value!r}"[:200])
    return value


def _check_view(desc):
    """Shape, strides and offset of a description; returns (shape, stride, offset, numel,
    span): span is one past the highest element the view touches (0 when empty)."""
    shape = desc.get("shape")
    stride = desc.get("stride")
    if not isinstance(shape, list) or not isinstance(stride, list) or \
            len(shape) > MAX_DIMS or len(stride) != len(shape):
        raise TransportError("bad shape/stride")
    shape = [_int(s, "size", 0, MAX_ELEMENTS) for s in shape]
    stride = [_int(s, "stride", 0, MAX_ELEMENTS) for s in stride]
    offset = _int(desc.get("offset", 0), "storage offset")
    numel = 1
    for s in shape:
        numel *= s
    if numel > MAX_ELEMENTS:
        raise TransportError("tensor too large")
    span = 0 if numel == 0 else offset + reach(shape, stride)
    return shape, stride, offset, numel, span


def reach(shape, stride):
    """Pure: how many elements a non-empty view of `shape` and `stride` reaches from its
    first one (the last it touches, plus one)."""
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


class Exporter:
    """Describes tensors for the other process; CPU tensors are written to files in `xfer_dir`
    (its own names, never reused within a task)."""

    def __init__(self, torch, xfer_dir, prefix):
        self.torch = torch
        self.xfer_dir = xfer_dir
        self.prefix = prefix
        self.count = 0

    def export(self, t, shared_file=False):
        """A description of tensor `t`. CUDA: an IPC handle of its storage (no copy).
        CPU: a contiguous copy in a new file; with `shared_file` the returned tensor is the
        file mapped shared, so the caller can hand that mapping out and look at it later."""
        torch = self.torch
        dtype = _dtype_name(torch, t.dtype)
        if t.device.type == "cuda":
            storage = t.untyped_storage()
            (device, handle, size_bytes, offset_bytes, ref_handle, ref_offset, event_handle,
             event_sync) = storage._share_cuda_()
            return {"kind": "cuda", "dtype": dtype, "shape": list(t.shape),
                    "stride": list(t.stride()), "offset": t.storage_offset(),
                    "device": int(device), "handle": _b64(handle),
                    "size_bytes": int(size_bytes), "offset_bytes": int(offset_bytes),
                    "ref_handle": _b64(ref_handle), "ref_offset": int(ref_offset),
                    "event_handle": _b64(event_handle), "event_sync": bool(event_sync)}, t
        if t.device.type != "cpu":
            raise TransportError(f"tensors on {t.device.type} cannot be transferred")
        self.count += 1
        path = os.path.join(self.xfer_dir, f"{self.prefix}-{self.count}.bin")
        flat = t.detach().contiguous().reshape(-1)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        finally:
            os.close(fd)
        desc = {"kind": "file", "dtype": dtype, "shape": list(t.shape),
                "stride": list(_contiguous_stride(list(t.shape))), "offset": 0,
                "file": os.path.basename(path)}
        mapped = None
        if shared_file:
            mapped = map_file_shared(torch, path, t.dtype, list(t.shape))
        return desc, mapped

    def export_packed(self, like, device):
        """Empty tensors shaped, strided and typed like each of `like` (tensors on any device,
        e.g. "meta"), packed into one new allocation on CUDA `device` that is exported once:
        one IPC handle, reference count and interprocess event for all of them instead of one
        each, and each of those is a call through the driver's node-wide lock
        (docs/gpu-runs/2026-11-28-contention-h200/). The caller allocates inside its share
        pool. Returns (descriptions, views): the descriptions differ only in their view."""
        torch = self.torch
        starts, total = pack_layout(like)
        buf = torch.empty(max(total, 1), dtype=torch.uint8, device=f"cuda:{device}")
        base, _ = self.export(buf)
        views = packed_views(torch, buf, like, starts)
        descs = [dict(base, dtype=_dtype_name(torch, v.dtype), shape=list(v.shape),
                      stride=list(v.stride()), offset=v.storage_offset()) for v in views]
        return descs, views


def pack_layout(like):
    """Pure: where the view shaped like each of `like` starts in one packed allocation (bytes,
    in order, each at a multiple of PACK_ALIGN, none overlapping the next) and the bytes the
    allocation needs."""
    starts, total = [], 0
    for t in like:
        total = -(-total // PACK_ALIGN) * PACK_ALIGN
        starts.append(total)
        if t.numel():
            total += reach(t.shape, t.stride()) * t.element_size()
    return starts, total


def packed_views(torch, buf, like, starts):
    """Views of the uint8 tensor `buf`'s storage shaped, strided and typed like each of
    `like`, at `starts` (pack_layout)."""
    storage = buf.untyped_storage()
    views = []
    for t, start in zip(like, starts):
        view = torch.empty((0,), dtype=t.dtype, device=buf.device)
        view.set_(storage, start // t.element_size(), t.shape, t.stride())
        views.append(view)
    return views


def value_description(x):
    """An input that is not a tensor, as the judge sends it to the runner: by value, pickled.
    Only ever the judge's own object; nothing the runner sends is unpickled."""
    return {"value": base64.b64encode(pickle.dumps(x)).decode("ascii")}


def _contiguous_stride(shape):
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return list(reversed(stride))


def map_file_shared(torch, path, dtype, shape):
    """A tensor over the file's bytes, mapped shared: writes go to the file."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_file(path, shared=True, size=numel, dtype=dtype).reshape(shape)


def dtype_of(torch, name):
    if name not in DTYPES:
        raise TransportError(f"unknown dtype {name!r}"[:100])
    return getattr(torch, name)


def import_tensor(torch, desc, xfer_dir, device_index=None, shared=False, storages=None):
    """The tensor a description names, checked before anything is mapped.

    CUDA: maps the exporter's allocation (torch keeps the exporter's block alive until this
    mapping is dropped); with `storages` (a dict the caller keeps), an allocation already
    mapped through it is reused, so the views of a packed export (Exporter.export_packed) cost
    one mapping. File: reads the file (no symlinks, regular, exact size) into fresh memory, or
    with `shared` maps it shared (the runner's view of an input)."""
    if not isinstance(desc, dict):
        raise TransportError("tensor description is not an object")
    dtype = dtype_of(torch, desc.get("dtype"))
    shape, stride, offset, numel, span = _check_view(desc)
    itemsize = torch.empty((), dtype=dtype).element_size()
    kind = desc.get("kind")
    if kind == "cuda":
        size_bytes = _int(desc.get("size_bytes"), "storage size")
        if span * itemsize > size_bytes:
            raise TransportError("view reaches past its storage")
        device = _int(desc.get("device"), "device", 0, 64)
        if device_index is not None and device != device_index:
            raise TransportError("tensor on another device")
        handle = _unb64(desc.get("handle"), "ipc handle")
        ref_handle = _unb64(desc.get("ref_handle"), "ref counter handle")
        event_handle = _unb64(desc.get("event_handle"), "event handle")
        if not handle or size_bytes == 0:
            return torch.empty(shape, dtype=dtype, device=f"cuda:{device}")
        if ref_handle is None or not ref_handle.startswith(b"/torch_"):
            raise TransportError("bad ref counter handle")
        offset_bytes = _int(desc.get("offset_bytes"), "storage offset")
        key = (device, handle, size_bytes, offset_bytes)
        storage = storages.get(key) if storages is not None else None
        if storage is None:
            storage = torch.UntypedStorage._new_shared_cuda(
                device, handle, size_bytes, offset_bytes, ref_handle,
                _int(desc.get("ref_offset"), "ref counter offset"), event_handle,
                bool(desc.get("event_sync")))
            if storages is not None:
                storages[key] = storage
        t = torch.empty((0,), dtype=dtype, device=f"cuda:{device}")
        t.set_(storage, offset, shape, stride)
        return t
    if kind == "file":
        name = desc.get("file")
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise TransportError("bad transfer file name")
        if offset != 0 or stride != _contiguous_stride(shape):
            raise TransportError("file tensors are contiguous")
        path = os.path.join(xfer_dir, name)
        if shared:
            return map_file_shared(torch, path, dtype, shape)
        data = read_regular_file(path, numel * itemsize)
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
    raise TransportError(f"unknown tensor kind {kind!r}"[:100])


def read_regular_file(path, expected_size):
    """The bytes of a regular file, opened without following symlinks, of exactly the size
    expected."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise TransportError(f"cannot open transfer file: {e.strerror}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != expected_size:
            raise TransportError("transfer file is not a regular file of the expected size")
        chunks, left = [], expected_size
        while left:
            chunk = os.read(fd, min(left, 64 << 20))
            if not chunk:
                raise TransportError("transfer file shrank")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Output slots: outputs written into memory the judge shares once
# ---------------------------------------------------------------------------------------------

SLOT_KINDS = ("tensor", "tuple", "list")


def copy_into_slots(torch, out, slots):
    """Copies a forward's output into the judge's output `slots` (tensors mapped once, shaped
    like the reference's outputs) when it is a tensor, or a tuple or list of tensors, of
    exactly their shapes and dtypes; returns its kind (SLOT_KINDS), or None when it is not
    (nothing is copied: the caller describes it as it is, so the judge sees what it got).
    A copy is queued on the current stream; the caller syncs before answering."""
    if not slots:
        return None
    if isinstance(out, torch.Tensor):
        kind, tensors = "tensor", [out]
    elif isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        kind, tensors = ("tuple" if isinstance(out, tuple) else "list"), list(out)
    else:
        return None
    if len(tensors) != len(slots) or any(
            t.shape != s.shape or t.dtype != s.dtype or t.device != s.device
            for t, s in zip(tensors, slots)):
        return None
    for t, s in zip(tensors, slots):
        s.copy_(t)
    return kind


def from_slots(kind, slots):
    """The output the runner reported as written into `slots` (the judge's own views), in the
    container it reported; TransportError for a kind no honest runner sends."""
    if kind not in SLOT_KINDS or (kind == "tensor" and len(slots) != 1):
        raise TransportError(f"bad output slot kind {str(kind)[:40]!r}")
    if kind == "tensor":
        return slots[0]
    return tuple(slots) if kind == "tuple" else list(slots)
