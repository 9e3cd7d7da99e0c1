"""Weight-update endpoints of the engine server, as SGLang defines them.

``/update_weights_from_disk``: loads an HF checkpoint directory and installs it. While an update
runs it holds the writer lock (``app.gate``): new requests wait behind it; in-flight ones finish
first unless the server is paused or ``abort_all_requests`` is set.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from harness_jax.sampling.server_protocol import require


class WeightEndpoints:
    """The weight-update endpoints of an ``EngineServer`` (``app``: its engine, gate, version).

    ``load_model_fn``: ``path -> nnx model`` for ``/update_weights_from_disk`` (default
    ``qwen3_5.load_hf(path, dtype=app.dtype)``).
    """

    def __init__(self, app, load_model_fn: Optional[Callable[[str], Any]] = None):
        self.app = app
        self._load_model_fn = load_model_fn

    def _load(self, path: str):
        if self._load_model_fn is not None:
            return self._load_model_fn(path)
        from harness_jax.models import qwen3_5
        return qwen3_5.load_hf(path, dtype=self.app.dtype)

    def update_from_disk(self, body: Any) -> tuple[int, dict]:
        require(isinstance(body, dict), "body", "must be a JSON object")
        path = body.get("model_path")
        require(isinstance(path, str) and path, "model_path", "required: a checkpoint directory")
        version = body.get("weight_version")
        require(version is None or isinstance(version, (str, int)), "weight_version", "must be a string")
        abort_all = bool(body.get("abort_all_requests", False))
        flush = bool(body.get("flush_cache", True))
        app, engine = self.app, self.app.engine
        with app.update_lock:
            app.gate.clear()   # writer lock: new requests wait behind the update
            try:
                if not engine.paused and not abort_all:
                    while not engine.is_idle():   # in-flight requests finish first
                        time.sleep(0.01)
                try:
                    model = self._load(path)
                except Exception as e:   # bad path / incompatible checkpoint: 400, keep serving
                    return 400, {"success": False, "message": f"failed to load {path}: {type(e).__name__}: {e}",
                                 "num_paused_requests": 0}
                int_version = None
                if version is not None and str(version).lstrip("-").isdigit():
                    int_version = int(version)
                try:
                    v = engine.update_weights(model, version=int_version,
                                              in_flight="abort" if abort_all else "continue",
                                              flush_cache=flush)
                except ValueError as e:
                    return 400, {"success": False, "message": str(e), "num_paused_requests": 0}
                app.weight_version = str(version) if version is not None else str(v)
                app.model_path = path
                return 200, {"success": True, "message": "Succeeded to update model weights.",
                             "num_paused_requests": engine.num_running()}
            finally:
                app.gate.set()
