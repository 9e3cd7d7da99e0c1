"""Hugging Face checkpoint I/O for Qwen3.5: one declarative mapping table for load and export.

Loading streams tensor by tensor: the safetensors headers are parsed, and every parameter is
built with ``jax.make_array_from_callback`` straight into its target sharding; each callback
reads only the tensors (and rows) its shard needs with ``os.pread`` and keeps at most one source
tensor cached, so host memory never holds the checkpoint, only the loaded shards plus one tensor.

The table (``param_mapping``) maps each of our parameter paths to its HF source(s):
  * identity (our path == HF name, ``[out, in]`` layout kept) for almost everything;
  * ``cycles[j]`` (scan_layers) <- ``layers[c * cycle + j]`` stacked on a leading axis;
  * fused MoE experts ``experts.gate_up_proj [X, 2I, D]`` <- per-expert
    ``experts.{e}.gate_proj.weight`` / ``up_proj.weight`` (or the fused tensor if present),
    ``experts.down_proj [X, D, I]`` <- ``experts.{e}.down_proj.weight``.
Text weights are found under ``model.`` (``*ForCausalLM``) or ``model.language_model.``
(``*ForConditionalGeneration``); the vision tower and MTP heads are skipped with a log line.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import struct as _struct
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx

from .config import Qwen3_5Config
from .model import Qwen3_5ForCausalLM, layer_cycle

from harness_jax import sharding as shd

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A malformed checkpoint; the message names the tensor or field and the fix."""


_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_NP_TO_ST = {np.dtype(v): k for k, v in _ST_DTYPES.items()}
_IGNORED_PREFIXES = ("model.visual.", "visual.", "mtp.", "model.mtp.")


# ---------------------------------------------------------------------------------------------
# safetensors reading (header + pread, no full-file mapping)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TensorInfo:
    file: str
    dtype: str
    shape: tuple
    start: int   # absolute byte offset in the file
    end: int


def read_safetensors_index(ckpt_dir: str) -> dict[str, TensorInfo]:
    """name -> TensorInfo for every tensor of every ``*.safetensors`` file in ``ckpt_dir``."""
    if not os.path.isdir(ckpt_dir):
        raise CheckpointError(f"{ckpt_dir}: not a directory; pass a Hugging Face checkpoint directory")
    index_path = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(fn for fn in os.listdir(ckpt_dir) if fn.endswith(".safetensors"))
    if not files:
        raise CheckpointError(f"{ckpt_dir}: no *.safetensors files found (only safetensors checkpoints are "
                              f"supported; convert .bin checkpoints with transformers first)")
    out = {}
    for fn in files:
        path = os.path.join(ckpt_dir, fn)
        if not os.path.exists(path):
            raise CheckpointError(f"{index_path}: weight_map names {fn!r} but the file is missing")
        with open(path, "rb") as f:
            (n,) = _struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        base = 8 + n
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] not in _ST_DTYPES:
                raise CheckpointError(f"tensor {name!r} in {fn}: unsupported dtype {meta['dtype']}")
            s, e = meta["data_offsets"]
            out[name] = TensorInfo(path, meta["dtype"], tuple(meta["shape"]), base + s, base + e)
    return out


def _pread_into(path: str, start: int, view: memoryview) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while got < len(view):
            k = os.preadv(fd, [view[got:]], start + got)
            if k <= 0:
                raise CheckpointError(f"{path}: truncated while reading a tensor at byte {start + got}")
            got += k
    finally:
        os.close(fd)


def _read_tensor(info: TensorInfo, rows: Optional[slice] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Read one tensor (or a contiguous range of its leading rows) with pread; into ``out`` (a
    C-contiguous array of the right size and dtype) when given, without another host copy."""
    dt = np.dtype(_ST_DTYPES[info.dtype])
    shape = info.shape
    start, end = info.start, info.end
    if rows is not None and len(shape) >= 1:
        r0, r1, _ = rows.indices(shape[0])
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize
        start, end = info.start + r0 * row_bytes, info.start + r1 * row_bytes
        shape = (r1 - r0,) + tuple(shape[1:])
    if out is not None:
        if out.dtype != dt or out.nbytes != end - start or not out.flags.c_contiguous:
            raise CheckpointError(f"{info.file}: cannot read a {info.dtype}{list(shape)} tensor into a "
                                  f"{out.dtype}{list(out.shape)} buffer")
        _pread_into(info.file, start, memoryview(out.reshape(-1).view(np.uint8)))
        return out
    buf = bytearray(end - start)
    _pread_into(info.file, start, memoryview(buf))
    return np.frombuffer(buf, dtype=dt).reshape(shape)


# ---------------------------------------------------------------------------------------------
# the mapping table
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ParamSource:
    """How to build one of our parameters from HF tensors.

    ``layers``: HF layer index per slot of a stacked (scan) leading axis, or None.
    ``hf_name``: HF name with ``{layer}`` where the layer index goes (and ``{expert}`` for the
    per-expert form). ``kind``: "plain", "gate_up" or "down" (MoE experts).
    """
    path: tuple
    hf_name: str
    layers: Optional[tuple] = None
    kind: str = "plain"


def _path_str(path) -> str:
    return ".".join(str(p) for p in path)


def param_mapping(cfg: Qwen3_5Config, param_paths: Sequence[tuple]) -> list[ParamSource]:
    """The declarative table: our parameter path -> HF tensor name template (text-model prefix
    ``model.``; ``lm_head.weight`` at the top)."""
    out = []
    p = layer_cycle(cfg.layer_types)
    n_cycles = cfg.num_hidden_layers // p
    for path in param_paths:
        path = tuple(path)
        layers = None
        if path[:2] == ("model", "cycles"):
            j = int(path[2])
            layers = tuple(c * p + j for c in range(n_cycles))
            rest = path[3:]
            name = "model.layers.{layer}." + _path_str(rest)
        elif path[:2] == ("model", "layers"):
            rest = path[3:]
            layers = None
            name = f"model.layers.{int(path[2])}." + _path_str(rest)
        else:
            rest = path
            name = _path_str(path)
        kind = "plain"
        if rest[-2:] == ("experts", "gate_up_proj"):
            kind = "gate_up"
        elif rest[-2:] == ("experts", "down_proj"):
            kind = "down"
        out.append(ParamSource(path, name, layers, kind))
    return out


class _SourceReader:
    """Resolves HF names against the checkpoint, reads tensors, caches the last one read."""

    def __init__(self, tensors: dict[str, TensorInfo], text_prefix: str):
        self.tensors = tensors
        self.text_prefix = text_prefix
        self.used = set()
        self._cache_key = None
        self._cache_val = None

    def resolve(self, name: str) -> str:
        if name.startswith("model."):
            name = self.text_prefix + name[len("model."):]
        return name

    def has(self, name: str) -> bool:
        return self.resolve(name) in self.tensors

    def info(self, name: str, our_path: str) -> TensorInfo:
        full = self.resolve(name)
        if full not in self.tensors:
            raise CheckpointError(f"checkpoint is missing tensor {full!r} (needed for parameter {our_path}); "
                                  f"check that config.json matches the weights")
        return self.tensors[full]

    def read(self, name: str, our_path: str, rows=None) -> np.ndarray:
        info = self.info(name, our_path)
        self.used.add(self.resolve(name))
        key = (name, None if rows is None else (rows.start, rows.stop))
        if self._cache_key != key:
            self._cache_val = None  # release before reading the next one
            self._cache_val = _read_tensor(info, rows)
            self._cache_key = key
        return self._cache_val


def _expert_count(reader: _SourceReader, base: str) -> int:
    x = 0
    while reader.has(f"{base}.{x}.down_proj.weight"):
        x += 1
    return x


def _read_layer_tensor(reader: _SourceReader, src: ParamSource, name: str, cfg: Qwen3_5Config,
                       want_shape: tuple, idx: tuple) -> np.ndarray:
    """One (unstacked) parameter tensor, sliced to ``idx``; handles the MoE expert layouts."""
    our = _path_str(src.path)
    if src.kind == "plain":
        full_shape = reader.info(name, our).shape
        if tuple(full_shape) != tuple(want_shape):
            raise CheckpointError(f"tensor {reader.resolve(name)!r} has shape {tuple(full_shape)} but parameter "
                                  f"{our} expects {tuple(want_shape)}; config.json does not match the weights")
        rows = idx[0] if idx else None
        arr = reader.read(name, our, rows=rows if isinstance(rows, slice) else None)
        return arr[(slice(None),) + tuple(idx[1:])] if idx else arr
    base = name.rsplit(".", 1)[0]  # ...mlp.experts
    if reader.has(name):           # fused tensor already in HF's in-memory layout
        full_shape = reader.info(name, our).shape
        if tuple(full_shape) != tuple(want_shape):
            raise CheckpointError(f"tensor {reader.resolve(name)!r} has shape {tuple(full_shape)} but parameter "
                                  f"{our} expects {tuple(want_shape)}")
        return reader.read(name, our, rows=idx[0] if idx else None)[(slice(None),) + tuple(idx[1:])]
    X = want_shape[0]
    x_sel = range(X)[idx[0]] if idx else range(X)
    rest_idx = tuple(idx[1:]) if idx else ()
    if not reader.has(f"{base}.0.down_proj.weight"):
        raise CheckpointError(f"checkpoint is missing tensor {reader.resolve(name)!r} and its per-expert form "
                              f"{reader.resolve(base + '.0.down_proj.weight')!r} (parameter {our})")
    n_experts = _expert_count(reader, base)
    if n_experts != X:
        raise CheckpointError(f"{reader.resolve(base)}: checkpoint has {n_experts} experts but config.num_experts={X}")
    return _read_experts(reader, base, src.kind, cfg, list(x_sel), rest_idx, our)


def _read_experts(reader: _SourceReader, base: str, kind: str, cfg: Qwen3_5Config, experts: list, rest_idx: tuple,
                  our: str) -> np.ndarray:
    """Per-expert HF tensors (``{base}.{e}.gate_proj/up_proj/down_proj.weight``) stacked into our
    fused layout ``[experts, 2I, D]`` / ``[experts, D, I]``: each expert is read with ``pread``
    straight into its slot of one preallocated array (in the on-disk dtype), so host memory holds
    the stacked result once, not a copy per expert plus a stack. A shard that keeps only part of
    the inner dims (``rest_idx``) reads each expert whole into one reused buffer and copies its part."""
    I, D = cfg.moe_intermediate_size, cfg.hidden_size
    parts = ([("gate_proj", slice(0, I)), ("up_proj", slice(I, 2 * I))] if kind == "gate_up"
             else [("down_proj", slice(None))])
    want = (I, D) if kind == "gate_up" else (D, I)
    infos = {}
    for e in experts:
        for proj, _ in parts:
            hf = f"{base}.{e}.{proj}.weight"
            info = reader.info(hf, our)
            if tuple(info.shape) != want:
                raise CheckpointError(f"tensor {reader.resolve(hf)!r} has shape {tuple(info.shape)}, expected {want}")
            reader.used.add(reader.resolve(hf))
            infos[(e, proj)] = info
    full = (2 * I, D) if kind == "gate_up" else (D, I)
    dt = np.dtype(_ST_DTYPES[infos[(experts[0], parts[0][0])].dtype]) if experts else np.dtype(np.float32)
    whole = all(isinstance(r, slice) and r.indices(n) == (0, n, 1) for r, n in zip(rest_idx, full))
    out_shape = full if whole else np.empty(full, np.uint8)[rest_idx].shape
    out = np.empty((len(experts),) + tuple(out_shape), dt)
    tmp = None if whole else np.empty(full, dt)
    for i, e in enumerate(experts):
        dest = out[i] if whole else tmp
        for proj, rows in parts:
            _read_tensor(infos[(e, proj)], out=dest[rows])
        if not whole:
            out[i] = tmp[rest_idx]
    return out


def _norm_index(idx, ndim):
    idx = tuple(idx) + (slice(None),) * (ndim - len(idx))
    return idx


def _build_callback(reader, src: ParamSource, cfg, shape, np_dtype):
    def cb(index):
        index = _norm_index(index, len(shape))
        if src.layers is None:
            arr = _read_layer_tensor(reader, src, src.hf_name, cfg, shape, index)
        else:
            sel = range(len(src.layers))[index[0]]
            parts = [_read_layer_tensor(reader, src, src.hf_name.format(layer=src.layers[c]), cfg, shape[1:],
                                        index[1:]) for c in sel]
            arr = np.stack(parts)
        return np.ascontiguousarray(arr.astype(np_dtype, copy=False))
    return cb


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------
def _text_prefix(tensors: dict, cfg_dict: dict) -> str:
    if any(k.startswith("model.language_model.") for k in tensors):
        return "model.language_model."
    if any(k.startswith("model.") for k in tensors):
        return "model."
    raise CheckpointError("checkpoint has no tensors under 'model.' or 'model.language_model.'; is this a "
                          "Qwen3.5 checkpoint?")


def abstract_model(cfg: Qwen3_5Config, dtype=jnp.float32, param_dtype=jnp.float32, **kw):
    """(graphdef, abstract state) of a model without allocating weights."""
    model = nnx.eval_shape(lambda: Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), dtype=dtype,
                                                      param_dtype=param_dtype, **kw))
    return nnx.split(model)


def load_hf(path, dtype="float32", mesh=None, rules=None, param_dtype=None, config_overrides=None,
            strict: bool = True, **model_kw) -> Qwen3_5ForCausalLM:
    """Load a Hugging Face Qwen3.5 checkpoint directory (dense/MoE, CausalLM or ConditionalGeneration).

    ``dtype``: compute dtype (and default parameter dtype). ``mesh``/``rules``: target shardings
    (``harness_jax.sharding``); without a mesh every parameter goes to the default device.
    ``config_overrides``: runtime knobs such as ``scan_layers=True`` or ``remat="full"``.
    ``strict``: unexpected text tensors raise (vision/MTP tensors are always skipped).
    Kernel choices (``gdn_impl``, ``moe_impl``, ...) are ``config_overrides`` too; the MoE default
    ("auto") is expert parallel on the mesh given here (``moe.py``), sorted on one device.
    """
    path = os.fspath(path)
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
        raise CheckpointError(f"{path}: no config.json; pass a Hugging Face checkpoint directory")
    with open(cfg_path) as f:
        cfg_dict = json.load(f)
    cfg = Qwen3_5Config.from_hf(cfg_dict, **(config_overrides or {}))
    dtype = jnp.dtype(dtype)
    param_dtype = jnp.dtype(param_dtype or dtype)
    tensors = read_safetensors_index(path)
    prefix = _text_prefix(tensors, cfg_dict)
    skipped = [k for k in tensors if k.startswith(_IGNORED_PREFIXES)]
    if skipped:
        log.info("load_hf: skipping %d vision-tower / MTP tensors (text decoder only)", len(skipped))
    reader = _SourceReader(tensors, prefix)
    graphdef, abs_state = abstract_model(cfg, dtype, param_dtype, **model_kw)
    flat = nnx.to_flat_state(abs_state)
    table = {s.path: s for s in param_mapping(cfg, [p for p, _ in flat])}
    if mesh is not None:
        shardings = shd.state_shardings(abs_state, mesh, rules)
        flat_sh = dict(nnx.to_flat_state(shardings))
    leaves = []
    for p, var in flat:
        shape, vdt = var.shape, var.dtype
        src = table[tuple(p)]
        sharding = (flat_sh[p].get_value() if hasattr(flat_sh[p], "get_value") else flat_sh[p]) \
            if mesh is not None else jax.sharding.SingleDeviceSharding(jax.devices()[0])
        arr = jax.make_array_from_callback(shape, sharding, _build_callback(reader, src, cfg, shape, np.dtype(vdt)))
        leaves.append((p, var.replace(arr)))
    if strict:
        lm_head_tied = "lm_head.weight"
        unexpected = sorted(k for k in tensors if k not in reader.used and not k.startswith(_IGNORED_PREFIXES)
                            and not (cfg.tie_word_embeddings and k == lm_head_tied))
        if unexpected:
            raise CheckpointError(f"checkpoint has {len(unexpected)} tensors the model does not use, e.g. "
                                  f"{unexpected[:3]}; check config.json (layer_types, num_experts, "
                                  f"tie_word_embeddings) or pass strict=False")
    state = nnx.from_flat_state(leaves)
    model = nnx.merge(graphdef, state)
    if mesh is not None:
        model.set_mesh(mesh, rules)
    return model


# ---------------------------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------------------------
def hf_tensors(model: Qwen3_5ForCausalLM):
    """Yield ``(hf_name, fetch)`` in a stable order; ``fetch()`` returns one host numpy tensor."""
    cfg = model.config
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    table = param_mapping(cfg, [p for p, _ in flat])
    values = {tuple(p): v for p, v in flat}
    held = {"key": None, "value": None}   # the one stacked expert tensor on host (per layer), shared by its experts

    def held_fetch(key, fetch):
        if held["key"] != key:
            held["value"] = None          # release the previous layer's tensor before fetching the next
            held["value"] = fetch()
            held["key"] = key
        return held["value"]

    for src in table:
        var = values[src.path]
        layers = src.layers if src.layers is not None else (None,)
        for c, layer in enumerate(layers):
            name = src.hf_name if layer is None else src.hf_name.format(layer=layer)

            def fetch_one(var=var, c=c, stacked=src.layers is not None):
                a = var[...]
                if stacked:
                    a = a[c]
                return np.asarray(jax.device_get(a))

            if src.kind == "plain":
                yield name, fetch_one
            else:   # per-expert HF tensors: views of the stacked tensor, fetched to host once per layer
                base = name.rsplit(".", 1)[0]
                I = cfg.moe_intermediate_size
                get = functools.partial(held_fetch, (src.path, c), fetch_one)
                for x in range(cfg.num_experts):
                    if src.kind == "gate_up":
                        yield f"{base}.{x}.gate_proj.weight", (lambda g=get, x=x: g()[x, :I])
                        yield f"{base}.{x}.up_proj.weight", (lambda g=get, x=x: g()[x, I:])
                    else:
                        yield f"{base}.{x}.down_proj.weight", (lambda g=get, x=x: g()[x])


def save_hf(model: Qwen3_5ForCausalLM, out_dir, max_shard_bytes: int = 4 << 30, dtype=None) -> str:
    """Write ``config.json`` + safetensors (sharded with an index when large) that transformers loads.

    MoE experts are written per expert (``experts.{e}.gate_proj.weight``...), the layout
    transformers' ``save_pretrained`` produces and its loader converts. Tensors are fetched
    and written one at a time; a stacked expert tensor is fetched to host once per layer and its
    experts written as views of it (peak host memory: one layer's stacked tensor).
    ``dtype``: optional on-disk dtype (e.g. "bfloat16").
    """
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    cfg = model.config
    entries = list(hf_tensors(model))
    any_var = jax.tree.leaves(nnx.state(model, nnx.Param))[0]
    disk_dtype = np.dtype(jnp.dtype(dtype)) if dtype is not None else np.dtype(any_var.dtype)
    shapes = [entry_shape(model, name) for name, _ in entries]
    files, cur, cur_bytes = [], [], 0
    for entry, shape in zip(entries, shapes):
        nbytes = int(np.prod(shape, dtype=np.int64)) * disk_dtype.itemsize
        if cur and cur_bytes + nbytes > max_shard_bytes:
            files.append(cur)
            cur, cur_bytes = [], 0
        cur.append((entry, shape))
        cur_bytes += nbytes
    files.append(cur)
    weight_map, total = {}, 0
    names = (["model.safetensors"] if len(files) == 1 else
             [f"model-{i + 1:05d}-of-{len(files):05d}.safetensors" for i in range(len(files))])
    for fn, group in zip(names, files):
        total += _write_safetensors(os.path.join(out_dir, fn), [e for e, _ in group], [s for _, s in group],
                                    disk_dtype)
        for (name, _), _ in group:
            weight_map[name] = fn
    if len(files) > 1:
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    hf = cfg.to_hf_dict()
    hf["dtype"] = {np.dtype(np.float32): "float32", np.dtype(ml_dtypes.bfloat16): "bfloat16",
                   np.dtype(np.float16): "float16"}.get(disk_dtype, "float32")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf, f, indent=2)
    return out_dir


def entry_shape(model, name):
    """Shape of HF tensor ``name`` of ``model`` (per-expert and per-layer forms included)."""
    cfg = model.config
    if ".experts." in name and name.split(".experts.")[1][0].isdigit():
        D, I = cfg.hidden_size, cfg.moe_intermediate_size
        return (D, I) if name.endswith("down_proj.weight") else (I, D)
    parts = name.split(".")
    if parts[:2] == ["model", "layers"] and cfg.scan_layers:
        layer = int(parts[2])
        p = layer_cycle(cfg.layer_types)
        node = model.model.cycles[layer % p]
        for q in parts[3:]:
            node = getattr(node, q)
        return tuple(node.shape[1:])
    node = model
    for q in parts:
        node = node[int(q)] if q.isdigit() else getattr(node, q)
    return tuple(node.shape)


def _write_safetensors(path, group, shapes, disk_dtype) -> int:
    return write_safetensors(path, group, shapes, [np.dtype(disk_dtype)] * len(group))


def write_safetensors(path, group, shapes, dtypes) -> int:
    """Stream ``(name, fetch)`` tensors into one safetensors file, tensor i as ``dtypes[i]``
    (header from the known shapes, then data one tensor at a time); returns the data bytes."""
    header, offset = {}, 0
    for (name, _), shape, dt in zip(group, shapes, dtypes):
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        header[name] = {"dtype": _NP_TO_ST[np.dtype(dt)], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)
    with open(path, "wb") as f:
        f.write(_struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for (name, fetch), shape, dt in zip(group, shapes, dtypes):
            a = np.ascontiguousarray(np.asarray(fetch()).astype(dt, copy=False))
            if tuple(a.shape) != tuple(shape):
                raise CheckpointError(f"save_hf: tensor {name!r} has shape {a.shape}, planned {tuple(shape)}")
            f.write(memoryview(a.reshape(-1).view(np.uint8)))   # no bytes copy of the tensor
            del a
    return offset


class _MemoryReader(_SourceReader):
    """``_SourceReader`` over in-memory HF-named arrays (a weight update sent over the wire)."""

    def __init__(self, arrays: dict):
        super().__init__({k: TensorInfo("<memory>", "", tuple(np.shape(v)), 0, 0) for k, v in arrays.items()},
                         "model.")
        self.arrays = arrays

    def read(self, name: str, our_path: str, rows=None) -> np.ndarray:
        self.info(name, our_path)
        self.used.add(name)
        a = np.asarray(self.arrays[name])
        return a if rows is None else a[rows]


def _layer_names(src: ParamSource) -> list:
    return [src.hf_name if src.layers is None else src.hf_name.format(layer=l) for l in (src.layers or (None,))]


def _source_names(src: ParamSource, cfg: Qwen3_5Config, arrays: dict) -> list:
    """The HF tensor names parameter ``src`` is built from (per-expert names for MoE experts
    given that way)."""
    names = _layer_names(src)
    if src.kind == "plain":
        return names
    parts = ("gate_proj", "up_proj") if src.kind == "gate_up" else ("down_proj",)
    out = []
    for n in names:
        base = n.rsplit(".", 1)[0]
        out += [n] if n in arrays else [f"{base}.{x}.{q}.weight" for x in range(cfg.num_experts) for q in parts]
    return out


def state_from_hf_tensors(model: Qwen3_5ForCausalLM, arrays: dict) -> tuple[nnx.State, set]:
    """``model``'s parameter state with every parameter whose HF tensors are all in ``arrays``
    (``{hf_name: array}``, the names ``save_hf`` writes) replaced, in the parameter's dtype and
    sharding; the others are kept. Returns ``(state, names used)``: a parameter only partly
    covered (some layers of a stacked one) is left for a later call. Names the model does not
    have, or wrong shapes, raise ``CheckpointError``."""
    cfg = model.config
    reader = _MemoryReader(arrays)
    state = nnx.state(model, nnx.Param)
    flat = nnx.to_flat_state(state)
    table = {s.path: s for s in param_mapping(cfg, [p for p, _ in flat])}
    known, leaves = set(), []
    for p, var in flat:
        src = table[tuple(p)]
        needed = _source_names(src, cfg, arrays)
        known.update(_layer_names(src), _source_names(src, cfg, {}))
        if not all(reader.has(n) for n in needed):
            leaves.append((p, var))
            continue
        cur = var[...]
        cb = _build_callback(reader, src, cfg, cur.shape, np.dtype(cur.dtype))
        leaves.append((p, var.replace(jax.make_array_from_callback(cur.shape, cur.sharding, cb))))
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise CheckpointError(f"weight update names {len(unknown)} tensors the model does not have, e.g. "
                              f"{unknown[:3]}; send the names save_hf writes (model.layers.N...)")
    return nnx.from_flat_state(leaves), set(reader.used)
