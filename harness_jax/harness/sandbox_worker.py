"""The hook worker: a separate, reusable process that runs untrusted hook code.

Started by ``sandbox.HookSandbox`` as ``python -I -S sandbox_worker.py CONFIG_JSON`` (isolated
mode, no site packages, a scrubbed environment, inside ``unshare --net`` when the kernel allows a
network namespace). It deliberately imports nothing from ``harness_jax``.

Set-up, before any untrusted code is seen:
1. resource limits: address space, CPU seconds, file size, open files, core dumps, processes;
2. when started as root: drop to an unprivileged uid/gid (``nobody``), so process limits and file
   permissions apply and the parent's ``/proc/<pid>/environ`` is unreadable;
3. the reply channel moves to a private descriptor; fd 1 and 2 point at ``/dev/null``;
4. a ``sys.addaudithook`` hook (which cannot be removed) refuses every file open, new import,
   process, socket, ctypes, frame/traceback introspection, signal and ``os`` operation; it stays in
   force for the rest of the process.

Protocol: one JSON object per line on stdin, one JSON reply per line on the private descriptor.
Request ``{"id", "key", "source"?, "fn", "ctx", "nb"}``: ``source`` is sent the first time a
``key`` is used and compiled once; EVERY call then executes the compiled module into a fresh
namespace of allow-listed builtins and module-free helpers (``re``/``math`` proxies, a
per-namespace ``SequenceMatcher`` subclass) and calls ``fn(ctx, nb)`` with ``ctx`` given
attribute access. Nothing a hook writes outside ``nb`` survives its call: function attributes,
mutable defaults and helper-class attributes all live in the call's own namespace, so no state
crosses calls, episodes or overlays (``nb``, the per-episode notebook the host keeps, is the only
memory). Reply ``{"id", "ok": true, "result", "nb"}`` or ``{"id", "ok": false, "error"}``.
Timeouts are the host's job (it kills this process).
"""
import builtins
import json
import math
import os
import re
import resource
import sys
import types
from difflib import SequenceMatcher

ALLOWED_BUILTINS = (
    "abs", "all", "any", "bool", "dict", "enumerate", "Exception", "filter", "float", "int",
    "isinstance", "len", "list", "map", "max", "min", "range", "reversed", "round", "set",
    "sorted", "str", "sum", "tuple", "zip",
)
NOBODY = 65534


class AttrDict(dict):
    """A dict whose keys also read as attributes (missing attributes read as None)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            return None


def _wrap(value):
    if isinstance(value, dict):
        return AttrDict((k, _wrap(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _namespace():
    safe_builtins = {name: getattr(builtins, name) for name in ALLOWED_BUILTINS}
    re_proxy = types.SimpleNamespace(
        search=re.search, match=re.match, fullmatch=re.fullmatch, findall=re.findall,
        finditer=re.finditer, sub=re.sub, subn=re.subn, split=re.split, escape=re.escape,
        compile=re.compile, IGNORECASE=re.IGNORECASE, I=re.IGNORECASE, MULTILINE=re.MULTILINE,
        M=re.MULTILINE, DOTALL=re.DOTALL, S=re.DOTALL)
    math_proxy = types.SimpleNamespace(**{
        name: getattr(math, name) for name in (
            "floor", "ceil", "sqrt", "log", "log2", "log10", "exp", "fabs", "isfinite", "isnan",
            "isinf", "pow", "trunc", "fsum", "gcd", "inf", "nan", "pi", "e", "hypot", "isclose")})
    # a subclass per namespace: an attribute a hook sets on it dies with the call
    matcher = type("SequenceMatcher", (SequenceMatcher,), {})
    return {"__builtins__": safe_builtins, "re": re_proxy, "math": math_proxy,
            "SequenceMatcher": matcher}


def _apply_limits(cfg):
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cfg["as_mb"] * mb, cfg["as_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["fsize_bytes"], cfg["fsize_bytes"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["nofile"], cfg["nofile"]))


def _drop_privileges():
    """Root -> nobody. Inside an unprivileged user namespace (``unshare --user``) uid 0 is
    already unprivileged outside it and ``nobody`` is not mapped, so a failure is tolerated."""
    if os.getuid() != 0:
        return os.getuid()
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    except OSError:
        pass
    return os.getuid()


def _audit(event, args):
    """Refuses dangerous events. Tamper-proof by construction: the blocked prefixes are a
    constant of this function's code object (code objects are immutable, and reading or replacing
    ``__code__`` is itself an audited event), it reads no globals before deciding, and any
    exception it raises - even one caused by a patched ``PermissionError`` name - blocks."""
    if event.startswith((
            "open", "import", "os.", "subprocess.", "socket.", "ctypes.", "shutil.",
            "sys._getframe", "sys.settrace", "sys.setprofile", "sys._current_frames",
            "sys.addaudithook", "object.__getattr__", "object.__setattr__", "object.__delattr__",
            "code.__new__", "function.__new__", "marshal.", "pickle.", "gc.", "mmap.", "fcntl.",
            "resource.", "signal.", "pty.", "webbrowser.", "urllib.", "http.", "ftplib.",
            "smtplib.", "glob.", "tempfile.", "builtins.input", "cpython.run_", "sqlite3.",
            "syslog.", "time.sleep")):
        raise PermissionError("sandbox: " + event + " is not allowed")


def main():
    cfg = json.loads(sys.argv[1])
    scratch = cfg["scratch"]
    os.chdir(scratch)
    # The reply channel: a private duplicate of stdout; fd 1/2 go to /dev/null so stray writes
    # through sys.stdout cannot forge replies.
    reply_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    os.environ.clear()
    uid = _drop_privileges()
    _apply_limits(cfg)
    # no new processes: the limit counts every process of this uid
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    stdin = sys.stdin.buffer
    cache = {}
    order = []
    hello = {"ready": True, "pid": os.getpid(), "uid": uid, "netns": bool(cfg.get("netns")),
             "limits": {k: cfg[k] for k in ("as_mb", "cpu_s", "fsize_bytes", "nofile")}}
    os.write(reply_fd, (json.dumps(hello) + "\n").encode())
    sys.addaudithook(_audit)
    # Drop what the hooks have no business reaching through gadget chains.
    for name in ("resource", "difflib", "types"):
        sys.modules.pop(name, None)

    def reply(obj):
        try:
            data = json.dumps(obj, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            data = json.dumps({"id": obj.get("id"), "ok": False,
                               "error": f"ContractError: hook returned a non-JSON value ({e})"})
        buf = (data + "\n").encode("utf-8", "replace")
        while buf:
            n = os.write(reply_fd, buf)
            buf = buf[n:]

    while True:
        line = stdin.readline()
        if not line:
            return
        try:
            req = json.loads(line)
        except ValueError:
            reply({"id": None, "ok": False, "error": "ProtocolError: request is not JSON"})
            continue
        rid = req.get("id")
        key = req.get("key")
        try:
            code = cache.get(key)
            if code is None:
                source = req.get("source")
                if source is None:
                    reply({"id": rid, "ok": False, "error": "UnknownKey: send the source"})
                    continue
                code = compile(source, "<hook>", "exec")
                cache[key] = code
                order.append(key)
                if len(order) > 256:
                    cache.pop(order.pop(0), None)
            ns = _namespace()                # fresh for every call (module docstring)
            exec(code, ns)
            fn = ns.get(req.get("fn", "hook"))
            if not callable(fn):
                reply({"id": rid, "ok": False, "error": "ContractError: no function "
                                                        f"{req.get('fn', 'hook')!r}"})
                continue
            nb = req.get("nb") or {}
            result = fn(_wrap(req.get("ctx") or {}), nb)
            reply({"id": rid, "ok": True, "result": result, "nb": nb})
        except BaseException as e:  # noqa: BLE001 - any failure means "no effect"
            if isinstance(e, KeyboardInterrupt):
                return
            msg = str(e)[:300]
            reply({"id": rid, "ok": False, "error": f"{type(e).__name__}: {msg}"})


if __name__ == "__main__":
    main()
