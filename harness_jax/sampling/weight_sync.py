"""What a weight sync to SGLang-API servers sends, and how (the client's protocol is in
``sglang_client``; the server double's side in ``server_weights``).

Three transports, all carrying Hugging Face-named tensors (the names ``qwen3_5.save_hf`` writes)
with the weight matrices in bf16 and the 1-D parameters (norms, biases, ``A_log``, ``dt_bias``)
in their own dtype (fp32 for a learner): the policy is cast on device, once, before anything
leaves it.
  * ``disk``: a bf16 HF export to a memory-backed directory (``/dev/shm`` by default, see
    ``default_sync_dir``), written shard by shard, each JAX process writing its own share of
    the tensors (``export_hf``); then ``/update_weights_from_disk``. Half the bytes of the fp32
    ``save_hf`` export and no disk (for servers on the same host; servers elsewhere need a
    shared mount, ``rollout.sync_dir``).
  * ``distributed``: SGLang's ``/init_weights_update_group`` + ``/update_weights_from_distributed``:
    the trainer is rank 0 of a torch.distributed group with every server (NCCL on GPUs, gloo on
    CPU) and broadcasts the tensors bucket by bucket while the servers receive them (``TrainerGroup``).
    No file at all. Needs torch in the trainer process (imported only here).
  * ``tensor``: SGLang's ``/update_weights_from_tensor``: the named tensors serialized as SGLang's
    ``MultiprocessingSerializer`` does (torch's ``ForkingPickler``; storages are shared through
    shared memory, so client and server share a host: the colocated case).
"""
from __future__ import annotations

import base64
import dataclasses
import datetime
import io
import json
import os
import socket
import tempfile
import threading
import time
from typing import Iterator, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

SYNC_METHODS = ("disk", "distributed", "tensor")


def default_sync_dir(name: str = "policy") -> str:
    """A memory-backed directory for weight exports: ``/dev/shm/harness_jax/<name>`` when
    ``/dev/shm`` is a writable tmpfs (Linux), else the temp dir."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    return os.path.join(base, "harness_jax", name)


def _export_dtype(a, dtype) -> np.dtype:
    return np.dtype(dtype) if a.ndim >= 2 and jnp.issubdtype(a.dtype, jnp.floating) else np.dtype(a.dtype)


def cast_for_export(model, dtype="bfloat16"):
    """A model whose weight matrices are ``dtype`` (1-D parameters unchanged), cast on device in
    one program: what every transport sends. Arrays sharded across hosts are then gathered
    whole onto every host (in the smaller dtype), so each process can write any tensor."""
    graphdef, state = nnx.split(model)
    dt = jnp.dtype(dtype)
    cast = jax.jit(lambda st: jax.tree_util.tree_map(lambda a: a.astype(_export_dtype(a, dt)), st))
    state = cast(state)
    if not all(getattr(a, "is_fully_addressable", True) for a in jax.tree_util.tree_leaves(state)):
        from jax.experimental import multihost_utils
        state = jax.tree_util.tree_map(
            lambda a: a if a.is_fully_addressable else np.asarray(multihost_utils.process_allgather(a, tiled=True)),
            state)
    return nnx.merge(graphdef, state)


def named_arrays(model) -> Iterator[tuple[str, np.ndarray]]:
    """``(hf_name, host array)`` of every tensor of ``model`` in a stable order (one at a time)."""
    from harness_jax.models.qwen3_5 import checkpoint
    for name, fetch in checkpoint.hf_tensors(model):
        yield name, fetch()


@dataclasses.dataclass
class ExportReport:
    out_dir: str
    files: list
    bytes: int            # bytes this process wrote
    seconds: float


def export_hf(model, out_dir: str, dtype="bfloat16", *, process_index: Optional[int] = None,
              process_count: Optional[int] = None, max_shard_bytes: int = 2 << 30) -> ExportReport:
    """An HF checkpoint of ``model`` (matrices in ``dtype``) that SGLang / transformers load,
    written by every JAX process together: tensors are dealt to ``process_count`` writers by
    size (the same deal on every process, no communication), process ``p`` writes
    ``model-{p+1:05d}-of-{n:05d}.safetensors`` (split further past ``max_shard_bytes``) and
    process 0 also writes ``config.json`` and the index. Call it on every process (arrays
    sharded across hosts are gathered tensor by tensor). Returns what this process wrote."""
    from harness_jax.models.qwen3_5 import checkpoint
    t0 = time.perf_counter()
    p = jax.process_index() if process_index is None else int(process_index)
    n = jax.process_count() if process_count is None else int(process_count)
    model = cast_for_export(model, dtype)
    entries = list(checkpoint.hf_tensors(model))
    shapes = [checkpoint.entry_shape(model, name) for name, _ in entries]
    vectors = [a.dtype for a in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)) if a.ndim < 2]
    dtypes = [np.dtype(jnp.dtype(dtype)) if len(s) >= 2 else np.dtype(vectors[0] if vectors else np.float32)
              for s in shapes]
    sizes = [int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in zip(shapes, dtypes)]
    owner, load = [0] * len(entries), [0] * n
    for i in sorted(range(len(entries)), key=lambda i: -sizes[i]):   # largest first to the lightest writer
        owner[i] = int(np.argmin(load))
        load[owner[i]] += sizes[i]
    files: dict = {}                   # writer -> [[entry index, ...] per file]
    for w in range(n):
        groups, cur, cur_bytes = [], [], 0
        for i in (i for i in range(len(entries)) if owner[i] == w):
            if cur and cur_bytes + sizes[i] > max_shard_bytes:
                groups.append(cur)
                cur, cur_bytes = [], 0
            cur.append(i)
            cur_bytes += sizes[i]
        groups.append(cur)
        files[w] = groups
    total = sum(len(g) for g in files.values())
    names, k = {}, 0
    for w in range(n):
        for j in range(len(files[w])):
            k += 1
            names[(w, j)] = f"model-{k:05d}-of-{total:05d}.safetensors"
    os.makedirs(out_dir, exist_ok=True)
    written, mine = 0, []
    for j, group in enumerate(files[p]):
        if not group:
            continue
        fn = names[(p, j)]
        written += checkpoint.write_safetensors(
            os.path.join(out_dir, fn), [entries[i] for i in group],
            [shapes[i] for i in group], [dtypes[i] for i in group])
        mine.append(fn)
    if p == 0:
        weight_map = {entries[i][0]: names[(w, j)] for w in range(n) for j, g in enumerate(files[w]) for i in g}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": int(sum(sizes))}, "weight_map": weight_map}, f, indent=2)
        hf = model.config.to_hf_dict()
        hf["dtype"] = str(jnp.dtype(dtype))
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(hf, f, indent=2)
    return ExportReport(out_dir, mine, written, time.perf_counter() - t0)


def buckets(named: Iterator[tuple[str, np.ndarray]], bucket_bytes: int) -> Iterator[list]:
    """Groups ``(name, array)`` pairs into lists of at most ``bucket_bytes`` (one tensor larger
    than that is a bucket of its own)."""
    cur, size = [], 0
    for name, a in named:
        if cur and size + a.nbytes > bucket_bytes:
            yield cur
            cur, size = [], 0
        cur.append((name, a))
        size += a.nbytes
    if cur:
        yield cur


# ---------------------------------------------------------------------------------------------
# torch interop (the distributed and tensor transports; torch is imported only here)
# ---------------------------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError as e:   # pragma: no cover - torch is installed wherever this runs in CI
        raise RuntimeError("rollout.sync_method 'distributed' / 'tensor' needs torch in the trainer process "
                           "(pip install torch); or use sync_method='disk'") from e
    return torch


def to_torch(a: np.ndarray):
    """A torch tensor viewing a host array (bf16 through its bits)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:   # torch tensors are writable views
        a = a.copy()
    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def from_torch(t) -> np.ndarray:
    torch = _torch()
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(jnp.bfloat16)
    return t.numpy()


def dtype_name(a: np.ndarray) -> str:
    return "bfloat16" if a.dtype == jnp.bfloat16 else str(a.dtype)


def serialize_named_tensors(named: list) -> str:
    """``serialized_named_tensors`` entry of ``/update_weights_from_tensor``: base64 of torch's
    ``ForkingPickler`` dump of ``[(name, tensor), ...]`` (SGLang's ``MultiprocessingSerializer``),
    storages in shared memory (the ``file_system`` strategy: readable by another process on the
    host while the caller keeps the tensors alive)."""
    _torch()
    import torch.multiprocessing as tmp
    from multiprocessing.reduction import ForkingPickler
    if tmp.get_sharing_strategy() != "file_system":   # this process's strategy: shm names, no fd passing
        tmp.set_sharing_strategy("file_system")
    tensors = [(n, to_torch(a).share_memory_()) for n, a in named]
    buf = io.BytesIO()
    ForkingPickler(buf).dump(tensors)
    return base64.b64encode(buf.getvalue()).decode()


def deserialize_named_tensors(payload: str) -> list:
    """The server side of ``serialize_named_tensors``: ``[(name, host array), ...]``. It unpickles
    what the client sent, as SGLang does: only for trusted trainers on the same host."""
    _torch()
    import pickle

    import torch.multiprocessing  # noqa: F401  (registers torch's storage reducers)
    return [(n, from_torch(t)) for n, t in pickle.loads(base64.b64decode(payload))]


def free_port(host: str = "127.0.0.1") -> int:
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def new_group(master_address: str, master_port: int, rank: int, world_size: int, backend: str = "gloo",
              timeout_s: float = 300.0):
    """A torch.distributed process group of its own (not the global default one), joined through
    a TCP store at ``master_address:master_port`` (rank 0 hosts the store); blocks until all
    ``world_size`` ranks joined. ``backend``: "gloo" (CPU) or "nccl" (GPU)."""
    torch = _torch()
    from torch.distributed import TCPStore
    timeout = datetime.timedelta(seconds=timeout_s)
    store = TCPStore(master_address, int(master_port), int(world_size), is_master=(rank == 0),
                     wait_for_workers=False, timeout=timeout)
    if backend == "gloo":
        return torch.distributed.ProcessGroupGloo(store, int(rank), int(world_size), timeout)
    if backend == "nccl":
        return torch.distributed.ProcessGroupNCCL(store, int(rank), int(world_size))
    raise ValueError(f"weights update group backend {backend!r}: use 'gloo' or 'nccl'")


class TrainerGroup:
    """The trainer's side (rank 0) of a weights update group with SGLang servers.

    ``start()`` hosts the TCP store and joins in a background thread (the servers join through
    ``/init_weights_update_group`` meanwhile); ``wait()`` returns once the group formed.
    ``broadcast(bucket)`` sends one bucket's tensors in order, as the servers receive them.
    """

    def __init__(self, world_size: int, master_address: str = "127.0.0.1", master_port: int = 0,
                 backend: str = "gloo", group_name: str = "weight_update_group", timeout_s: float = 300.0):
        self.world_size, self.backend, self.group_name = int(world_size), backend, group_name
        self.master_address = master_address
        self.master_port = int(master_port) or free_port(master_address)
        self.timeout_s = timeout_s
        self._pg = None
        self._err: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        def join():
            try:
                self._pg = new_group(self.master_address, self.master_port, 0, self.world_size, self.backend,
                                     self.timeout_s)
            except BaseException as e:   # reported by wait()
                self._err = e
        self._thread = threading.Thread(target=join, name="weight-group", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join(self.timeout_s)
        if self._err is not None or self._pg is None:
            raise RuntimeError(f"weights update group did not form: {self._err!r}")

    def broadcast(self, bucket: list) -> None:
        """Sends one bucket's tensors in order (to the GPU first for NCCL)."""
        for _, a in bucket:
            t = to_torch(a)
            self._pg.broadcast(t.cuda() if self.backend == "nccl" else t, 0).wait()
