"""Weight-update endpoints of the engine server, as SGLang (0.5.23) defines them.

* ``/update_weights_from_disk``: loads an HF checkpoint directory and installs it.
* ``/begin_weight_update`` / ``/end_weight_update``: a session; tensors sent between them are
  staged and installed together at the end (one version). Without a session every update call
  installs what it carries at once (older servers' behaviour).
* ``/init_weights_update_group`` / ``/destroy_weights_update_group`` /
  ``/update_weights_from_distributed``: the server joins a torch.distributed group at
  ``rank_offset`` (gloo here; the trainer is rank 0) and receives the named tensors the call
  lists (``names`` / ``dtypes`` / ``shapes``) by broadcast, in order.
* ``/update_weights_from_tensor``: ``serialized_named_tensors`` (SGLang's serializer format,
  ``weight_sync.deserialize_named_tensors``; trusted same-host trainers only, as in SGLang).
* ``/update_weight_version``: renames the version (``abort_all_requests`` honoured as sent).
Named tensors patch the server's base model (the last one it loaded, or the one it was built
with) with ``qwen3_5.checkpoint.state_from_hf_tensors``. While an update installs it holds the
writer lock (``app.gate``): new requests wait behind it; in-flight ones finish first unless the
server is paused or ``abort_all_requests`` is set.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from harness_jax.sampling.server_protocol import BadRequest, require


def _version_arg(body: dict, key: str = "weight_version"):
    version = body.get(key)
    require(version is None or isinstance(version, (str, int)), key, "must be a string")
    return version


class WeightEndpoints:
    """The weight-update endpoints of an ``EngineServer`` (``app``: its engine, gate, version).

    ``load_model_fn``: ``path -> nnx model`` for ``/update_weights_from_disk`` (default
    ``qwen3_5.load_hf(path, dtype=app.dtype)``). ``base_model``: the model the engine serves,
    in the learner's format (what tensor and distributed updates patch).
    """

    def __init__(self, app, load_model_fn: Optional[Callable[[str], Any]] = None, base_model=None):
        self.app = app
        self._load_model_fn = load_model_fn
        self.base_model = base_model
        self._lock = threading.Lock()
        self._staged: dict = {}              # hf name -> array, waiting for the end of a session
        self._session: Optional[dict] = None
        self._groups: dict = {}              # group name -> process group

    def _load(self, path: str):
        if self._load_model_fn is not None:
            return self._load_model_fn(path)
        from harness_jax.models import qwen3_5
        return qwen3_5.load_hf(path, dtype=self.app.dtype)

    def _install(self, new, version, *, abort_all: bool, flush: bool) -> tuple[int, dict]:
        """Installs a model / state under the writer lock (SGLang's semantics, see module doc)."""
        app, engine = self.app, self.app.engine
        with app.update_lock:
            app.gate.clear()   # writer lock: new requests wait behind the update
            try:
                if not engine.paused and not abort_all:
                    while not engine.is_idle():   # in-flight requests finish first
                        time.sleep(0.01)
                int_version = int(version) if version is not None and str(version).lstrip("-").isdigit() else None
                try:
                    v = engine.update_weights(new, version=int_version, in_flight="abort" if abort_all else "continue",
                                              flush_cache=flush)
                except ValueError as e:
                    return 400, {"success": False, "message": str(e), "num_paused_requests": 0}
                app.weight_version = str(version) if version is not None else str(v)
                return 200, {"success": True, "message": "Succeeded to update model weights.",
                             "num_paused_requests": engine.num_running()}
            finally:
                app.gate.set()

    # ------------------------------------------------------------------------------ disk
    def update_from_disk(self, body: Any) -> tuple[int, dict]:
        require(isinstance(body, dict), "body", "must be a JSON object")
        path = body.get("model_path")
        require(isinstance(path, str) and path, "model_path", "required: a checkpoint directory")
        version = _version_arg(body)
        try:
            model = self._load(path)
        except Exception as e:   # bad path / incompatible checkpoint: 400, keep serving
            return 400, {"success": False, "message": f"failed to load {path}: {type(e).__name__}: {e}",
                         "num_paused_requests": 0}
        status, out = self._install(model, version, abort_all=bool(body.get("abort_all_requests", False)),
                                    flush=bool(body.get("flush_cache", True)))
        if status == 200:
            self.base_model = model
            self.app.model_path = path
        return status, out

    # --------------------------------------------------------------------------- sessions
    def begin(self, body: Any) -> dict:
        with self._lock:
            self._session, self._staged = {"version": None, "flush": True, "abort_all": False}, {}
        return {"success": True, "message": "weight update session started"}

    def end(self, body: Any) -> tuple[int, dict]:
        with self._lock:
            session, staged = self._session, self._staged
            self._session, self._staged = None, {}
        if session is None:
            return 400, {"success": False, "message": "no weight update session; call /begin_weight_update first"}
        if not staged:
            return 200, {"success": True, "message": "nothing staged"}
        return self._apply(staged, session["version"], session["abort_all"], session["flush"], partial_ok=False)

    def _receive(self, named: list, body: dict) -> tuple[int, dict]:
        """Stages (in a session) or installs (without one) what an update call carried."""
        version = _version_arg(body)
        flush, abort_all = bool(body.get("flush_cache", True)), bool(body.get("abort_all_requests", False))
        with self._lock:
            if self._session is not None:
                self._staged.update(named)
                s = self._session
                s["version"] = version if version is not None else s["version"]
                s["flush"], s["abort_all"] = s["flush"] and flush, s["abort_all"] or abort_all
                return 200, {"success": True, "message": f"staged {len(named)} tensors"}
            self._staged.update(named)
            staged, self._staged = self._staged, {}
        return self._apply(staged, version, abort_all, flush, partial_ok=True)

    def _apply(self, staged: dict, version, abort_all: bool, flush: bool, partial_ok: bool) -> tuple[int, dict]:
        from harness_jax.models.qwen3_5.checkpoint import CheckpointError, state_from_hf_tensors
        if self.base_model is None:
            return 400, {"success": False, "message": "this server has no base model to patch (started from an "
                         "engine alone); use /update_weights_from_disk or pass EngineServer(model=...)"}
        try:
            state, used = state_from_hf_tensors(self.base_model, staged)
        except CheckpointError as e:
            return 400, {"success": False, "message": str(e)}
        left = {k: v for k, v in staged.items() if k not in used}
        if left and not partial_ok:
            return 400, {"success": False, "message": f"{len(left)} tensors cover only part of a parameter "
                         f"(e.g. {sorted(left)[:2]}); send every layer of it"}
        with self._lock:
            self._staged.update(left)    # a parameter completed by a later call
        from flax import nnx
        status, out = self._install(state, version, abort_all=abort_all, flush=flush)
        if status == 200:
            nnx.update(self.base_model, state)
        return status, out

    # ----------------------------------------------------------------------- distributed
    def init_group(self, body: Any) -> tuple[int, dict]:
        from harness_jax.sampling import weight_sync
        require(isinstance(body, dict), "body", "must be a JSON object")
        for k in ("master_address", "master_port", "rank_offset", "world_size"):
            require(body.get(k) is not None, k, "required")
        backend = body.get("backend", "nccl")
        require(backend in ("gloo", "nccl"), "backend", "use 'gloo' or 'nccl'")
        name = body.get("group_name", "weight_update_group")
        try:
            pg = weight_sync.new_group(str(body["master_address"]), int(body["master_port"]),
                                       int(body["rank_offset"]), int(body["world_size"]), backend)
        except Exception as e:
            return 400, {"success": False, "message": f"could not join the group: {type(e).__name__}: {e}"}
        self._groups[name] = pg
        return 200, {"success": True, "message": f"joined {name} as rank {body['rank_offset']}"}

    def destroy_group(self, body: Any) -> dict:
        self._groups.pop((body or {}).get("group_name", "weight_update_group"), None)
        return {"success": True, "message": "destroyed"}

    def update_from_distributed(self, body: Any) -> tuple[int, dict]:
        from harness_jax.sampling import weight_sync
        require(isinstance(body, dict), "body", "must be a JSON object")
        names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
        require(isinstance(names, list) and isinstance(dtypes, list) and isinstance(shapes, list)
                and len(names) == len(dtypes) == len(shapes), "names", "names, dtypes and shapes: lists of one length")
        require(body.get("load_format") in (None, "auto"), "load_format", "only per-tensor broadcasts are supported")
        pg = self._groups.get(body.get("group_name", "weight_update_group"))
        require(pg is not None, "group_name", "no such weights update group; call /init_weights_update_group first")
        torch = weight_sync._torch()
        named = []
        for n, d, s in zip(names, dtypes, shapes):
            dt = getattr(torch, str(d).replace("torch.", ""), None)
            if not isinstance(dt, torch.dtype):
                raise BadRequest("dtypes", f"{d!r} is not a torch dtype name")
            t = torch.empty(tuple(s), dtype=dt)
            pg.broadcast(t, 0).wait()
            named.append((n, weight_sync.from_torch(t)))
        return self._receive(named, body)

    def update_from_tensor(self, body: Any) -> tuple[int, dict]:
        from harness_jax.sampling import weight_sync
        require(isinstance(body, dict), "body", "must be a JSON object")
        payload = body.get("serialized_named_tensors")
        require(isinstance(payload, list) and payload and all(isinstance(p, str) for p in payload),
                "serialized_named_tensors", "a list of base64 strings, one per tensor-parallel rank")
        require(body.get("load_format") in (None, "auto"), "load_format", "only named tensors are supported")
        return self._receive(weight_sync.deserialize_named_tensors(payload[0]), body)

    def update_version(self, body: Any) -> dict:
        require(isinstance(body, dict) and body.get("new_version") is not None, "new_version", "required")
        if body.get("abort_all_requests", True):   # SGLang's default aborts everything in flight
            self.app.engine.abort(abort_all=True, message="Abort by update_weight_version")
        self.app.weight_version = str(body["new_version"])
        return {"success": True, "message": f"weight version {self.app.weight_version}"}
