"""The weight-sync protocol of ``SGLangClient`` (see ``shared/notes/sglang_api.md``, 1.2 and c.5).

One sync, on every server at once, in three phases:
  1. ``pause_generation`` -> ``flush_cache`` (retried until idle) -> ``begin_weight_update``
     (404: an older server without sessions);
  2. the update, by the chosen transport (``weight_sync``): ``disk`` (one
     ``update_weights_from_disk`` of a bf16 export), ``distributed`` (per bucket, one
     ``update_weights_from_distributed`` per server while the trainer broadcasts the bucket's
     tensors to the group), or ``tensor`` (per bucket, ``update_weights_from_tensor``);
  3. ``end_weight_update`` -> ``continue_generation`` -> verify ``/model_info.weight_version``.
Every phase is timed per server in the ``WeightSyncReport``.

Feature probing: ``distributed`` first needs every server to join the group
(``init_weights_update_group``, once per client); ``tensor`` is tried on the first bucket. A
404 (an older server), an SGLang version known to predate the endpoint, or a failed join makes
the sync fall back to ``disk`` (for every server, in the same sync), which the report says.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import shutil
import time
from typing import Optional

from harness_jax.sampling import weight_sync
from harness_jax.sampling.errors import SGLangServerError

log = logging.getLogger(__name__)

# SGLang versions that introduced an endpoint (older servers answer 404; see the notes' 1.3)
MIN_VERSION = {"distributed": (0, 4, 0), "tensor": (0, 4, 1)}


class SyncUnsupported(Exception):
    """The servers cannot take this transport: fall back to disk."""


@dataclasses.dataclass
class WeightSyncReport:
    weight_version: str
    method: str = "disk"                 # the transport that ran
    fallback: str = ""                   # why the requested transport was not used
    export_s: float = 0.0
    export_bytes: int = 0
    total_s: float = 0.0
    per_server: dict = dataclasses.field(default_factory=dict)   # url -> {phase: seconds, ...}


def sglang_version(info: dict) -> Optional[tuple]:
    """``(major, minor, patch)`` of an SGLang ``/server_info`` version string, None otherwise."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+).*", str(info.get("version", "")))
    return tuple(int(x) for x in m.groups()) if m else None


class WeightSyncer:
    """Runs syncs for one client (``client``: its HTTP calls, servers, retries, pause flag).

    Args:
      method: ``"disk"`` | ``"distributed"`` | ``"tensor"`` (``weight_sync.SYNC_METHODS``).
      dtype: dtype of the weight matrices sent (1-D parameters keep theirs).
      bucket_bytes: tensors per update call (distributed / tensor).
      group_backend / group_address: the weights update group's torch backend ("gloo" on
        CPU, "nccl" on GPUs) and the trainer's address the servers connect to.
    """

    def __init__(self, client, method: str = "disk", dtype: str = "bfloat16", bucket_bytes: int = 512 << 20,
                 group_backend: str = "gloo", group_address: str = "127.0.0.1"):
        if method not in weight_sync.SYNC_METHODS:
            raise ValueError(f"sync method {method!r}: use one of {weight_sync.SYNC_METHODS}")
        self.client, self.method, self.dtype = client, method, dtype
        self.bucket_bytes, self.group_backend, self.group_address = int(bucket_bytes), group_backend, group_address
        self._group: Optional[weight_sync.TrainerGroup] = None
        self._unsupported: dict = {}         # method -> why it cannot be used with these servers

    # ----------------------------------------------------------------------- per server
    async def _prepare(self, url: str, pause_mode: str) -> dict:
        c, t = self.client, {}
        t0 = time.perf_counter()
        t["paused"] = await c.post_ok(url, "/pause_generation", {"mode": pause_mode}, optional=True)
        t["pause_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(c.flush_retries):
            r = await c.call("POST", url + "/flush_cache")
            if r.status == 200:
                break
            await asyncio.sleep(c.flush_interval_s)
        else:
            raise SGLangServerError(f"{url}/flush_cache still busy after {c.flush_retries} tries "
                                    f"(last HTTP {r.status}); pause with mode='abort' or 'retract'")
        t["flush_s"], t["flush_tries"] = time.perf_counter() - t0, i + 1
        t["begin_end"] = await c.post_ok(url, "/begin_weight_update", {}, optional=True)
        return t

    async def _finish(self, url: str, version: str, t: dict) -> dict:
        c = self.client
        t0 = time.perf_counter()
        if t["begin_end"]:
            await c.post_ok(url, "/end_weight_update", {}, optional=True)
        t["update_s"] = t.get("update_s", 0.0) + time.perf_counter() - t0
        t0 = time.perf_counter()
        if t["paused"]:
            await c.post_ok(url, "/continue_generation", {})
        t["continue_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        info = await c.model_info(url)
        if str(info.get("weight_version")) != version:
            raise SGLangServerError(f"{url}: weight_version is {info.get('weight_version')!r} after the "
                                    f"update, expected {version!r}")
        t["verify_s"] = time.perf_counter() - t0
        return t

    def _update_body(self, version: str) -> dict:
        return {"weight_version": version, "flush_cache": True, "abort_all_requests": False}

    # ------------------------------------------------------------------------- transports
    async def _disk(self, path: str, version: str, times: dict) -> None:
        async def one(url):
            t0 = time.perf_counter()
            await self.client.post_ok(url, "/update_weights_from_disk", {"model_path": path, **self._update_body(version)},
                                      timeout=self.client.timeout_s)
            times[url]["update_s"] = time.perf_counter() - t0
        await asyncio.gather(*(one(u) for u in self.client.urls))

    async def _check_version(self, method: str) -> None:
        for url in self.client.urls:
            r = await self.client.call("GET", url + "/server_info")
            v = sglang_version(r.json) if r.status == 200 and isinstance(r.json, dict) else None
            if v is not None and v < MIN_VERSION[method]:
                raise SyncUnsupported(f"{url} runs SGLang {'.'.join(map(str, v))}, older than "
                                      f"{'.'.join(map(str, MIN_VERSION[method]))} ({method} updates)")

    async def _join_group(self) -> None:
        """Forms the weights update group with every server (once per client)."""
        if self._group is not None:
            return
        await self._check_version("distributed")
        c = self.client
        infos = []
        for url in c.urls:
            r = await c.call("GET", url + "/server_info")
            infos.append(r.json if r.status == 200 and isinstance(r.json, dict) else {})
        tps = [int(i.get("tp_size", 1) or 1) for i in infos]
        group = weight_sync.TrainerGroup(1 + sum(tps), self.group_address, backend=self.group_backend)
        group.start()
        offsets = [1 + sum(tps[:i]) for i in range(len(tps))]
        replies = await asyncio.gather(*(c.call("POST", u + "/init_weights_update_group", {
            "master_address": group.master_address, "master_port": group.master_port, "rank_offset": o,
            "world_size": group.world_size, "group_name": group.group_name, "backend": group.backend},
            timeout=group.timeout_s) for u, o in zip(c.urls, offsets)))
        bad = [(u, r) for u, r in zip(c.urls, replies) if r.status != 200]
        if bad:
            u, r = bad[0]
            raise SyncUnsupported(f"{u}/init_weights_update_group: HTTP {r.status} {r.text[:200]}")
        await asyncio.get_running_loop().run_in_executor(None, group.wait)
        self._group = group

    async def _distributed(self, model, version: str, times: dict) -> None:
        loop, c, group = asyncio.get_running_loop(), self.client, self._group
        for bucket in weight_sync.buckets(weight_sync.named_arrays(model), self.bucket_bytes):
            body = {"names": [n for n, _ in bucket], "dtypes": [weight_sync.dtype_name(a) for _, a in bucket],
                    "shapes": [list(a.shape) for _, a in bucket], "group_name": group.group_name,
                    **self._update_body(version)}
            t0 = time.perf_counter()
            posts = [asyncio.ensure_future(c.post_ok(u, "/update_weights_from_distributed", body, timeout=c.timeout_s))
                     for u in c.urls]
            await loop.run_in_executor(None, group.broadcast, bucket)
            await asyncio.gather(*posts)
            for u in c.urls:
                times[u]["update_s"] = times[u].get("update_s", 0.0) + time.perf_counter() - t0

    async def _tensor(self, model, version: str, times: dict) -> None:
        loop, c = asyncio.get_running_loop(), self.client
        first = True
        for bucket in weight_sync.buckets(weight_sync.named_arrays(model), self.bucket_bytes):
            payload = await loop.run_in_executor(None, weight_sync.serialize_named_tensors, bucket)
            for u in c.urls:
                t0 = time.perf_counter()
                r = await c.call("POST", u + "/update_weights_from_tensor",
                                 {"serialized_named_tensors": [payload], **self._update_body(version)},
                                 timeout=c.timeout_s)
                if r.status == 404 and first:
                    raise SyncUnsupported(f"{u}/update_weights_from_tensor: HTTP 404 (an older server)")
                if r.status != 200 or (isinstance(r.json, dict) and r.json.get("success") is False):
                            raise SGLangServerError(f"{u}/update_weights_from_tensor failed (HTTP {r.status}): {r.text[:300]}")
                times[u]["update_s"] = times[u].get("update_s", 0.0) + time.perf_counter() - t0
            first = False

    # ----------------------------------------------------------------------------- syncs
    async def _run(self, version: str, pause_mode: str, update) -> dict:
        """Phases 1-3 on every server around ``update(times)``; returns per-server times."""
        c = self.client
        c.set_paused(True)
        try:
            prepared = await asyncio.gather(*(self._prepare(u, pause_mode) for u in c.urls))
            times = dict(zip(c.urls, prepared))
            await update(times)
            await asyncio.gather(*(self._finish(u, version, times[u]) for u in c.urls))
        finally:
            c.set_paused(False)
        return times

    async def update_from_disk(self, model_path: str, version: str, pause_mode: str) -> WeightSyncReport:
        t0 = time.perf_counter()
        times = await self._run(version, pause_mode, lambda times: self._disk(model_path, version, times))
        return WeightSyncReport(version, "disk", total_s=time.perf_counter() - t0, per_server=times)

    async def sync_model(self, model, out_dir: Optional[str], version: str, pause_mode: str,
                         method: Optional[str] = None) -> WeightSyncReport:
        """One sync of ``model`` (matrices cast to ``dtype`` on device first) by ``method``
        (default the syncer's), falling back to a disk export to ``out_dir`` (default
        ``weight_sync.default_sync_dir``) when the servers cannot take it."""
        method = method or self.method
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        fallback = self._unsupported.get(method, "")
        if method != "disk" and not fallback:
            try:
                if method == "distributed":
                    await self._join_group()
                else:
                    await self._check_version("tensor")
                cast = await loop.run_in_executor(None, weight_sync.cast_for_export, model, self.dtype)
                fn = self._distributed if method == "distributed" else self._tensor
                times = await self._run(version, pause_mode, lambda times: fn(cast, version, times))
                return WeightSyncReport(version, method, total_s=time.perf_counter() - t0, per_server=times)
            except SyncUnsupported as e:
                fallback = self._unsupported[method] = str(e)
                log.warning("weight sync: %s updates unavailable (%s); falling back to disk", method, e)
                await asyncio.gather(*(self.client.post_ok(u, "/continue_generation", {}, optional=True)
                                       for u in self.client.urls))
        out_dir = out_dir or weight_sync.default_sync_dir(f"v{version}")
        t1 = time.perf_counter()
        exp = await loop.run_in_executor(None, lambda: weight_sync.export_hf(model, out_dir, self.dtype))
        export_s = time.perf_counter() - t1
        rep = await self.update_from_disk(out_dir, version, pause_mode)
        rep.fallback, rep.export_s, rep.export_bytes = fallback, export_s, exp.bytes
        rep.total_s = time.perf_counter() - t0
        return rep

    def close(self) -> None:
        self._group = None


def remove_export(path: Optional[str]) -> None:
    """Deletes a previous export directory (the servers have moved on)."""
    if path and os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
