"""Escape regression suite: every attack must be contained by the isolated hook worker.

Each attack runs twice: through ``run_hook`` (lint + worker) and straight in the worker with the
lint skipped, because the lint is not the security boundary. An attack "succeeds" only if it
returns ``{"escaped": ...}`` with evidence, or leaves a side effect the host can see (a file,
a leaked secret); the assertions check both.
"""
import glob
import os

import pytest

from harness_jax.harness.hooks import run_hook
from harness_jax.harness.lint import lint_hook_source
from harness_jax.harness.sandbox import HookSandbox, SandboxConfig

SECRET = "sk-hj-test-secret-4242"
_SOCKET_SO = getattr(__import__("_socket"), "__file__", "/nonexistent/_socket.so")
PWN = "/tmp/hj_pwned_{}"

WALK = '''
def walk(root):
    t = ().__class__.__class__
    seen = []
    todo = [root]
    for i in range(100000):
        if not todo:
            return seen
        c = todo.pop()
        seen.append(c)
        todo.extend(t.__subclasses__(c))
    return seen
'''


def _find(name, then):
    return WALK + f'''
def hook(ctx, nb):
    for c in walk(().__class__.__base__):
        if c.__name__ == {name!r}:
{then}
    return {{"note": "not found"}}
'''


ATTACKS = {
    "subclass_walk_os_system": _find("_wrap_close", "            return {'escaped': "
                                     "c.__init__.__globals__['system']('touch %s')}"
                                     % PWN.format(1)),
    "str_format_attribute_walk": '''
def hook(ctx, nb):
    return {"escaped": "{0.__class__.__getattr__.__globals__[os].environ}".format(ctx)}
''',
    "unbound_str_format": '''
def hook(ctx, nb):
    f = str.format
    return {"escaped": f("{0.__class__.__getattr__.__globals__[sys].modules[os].environ}", ctx)}
''',
    "module_gadget_re_enum": '''
def hook(ctx, nb):
    return {"escaped": re.enum.sys.modules["os"].system("touch %s")}
''' % PWN.format(2),
    "module_gadget_function_globals": '''
def hook(ctx, nb):
    os = re.search.__globals__["enum"].sys.modules["os"]
    return {"escaped": os.system("touch %s")}
''' % PWN.format(2),
    "f_string_walk": '''
def hook(ctx, nb):
    s = f"{[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__['system']('touch %s')}"
    return {"escaped": s}
''' % PWN.format(3),
    "type_dict_rebuilt_name": '''
def hook(ctx, nb):
    t = ().__class__.__class__
    name = "_" * 2 + "subclasses" + "_" * 2
    for c in t.__dict__[name](().__class__.__base__):
        if c.__name__ == "BuiltinImporter":
            return {"escaped": c.load_module("posix").system("touch %s")}
    return {}
''' % PWN.format(4),
    "traceback_frame_walk": '''
def hook(ctx, nb):
    try:
        1 / 0
    except Exception as e:
        g = e.__traceback__.tb_frame.f_back.f_globals
        return {"escaped": g["os"].system("touch %s")}
''' % PWN.format(5),
    "generator_frame_walk": '''
def hook(ctx, nb):
    g = (x for x in [1])
    return {"escaped": g.gi_frame.f_back.f_globals["os"].system("touch %s")}
''' % PWN.format(6),
    "fork": _find("BuiltinImporter", "            return {'escaped': c.load_module('posix').fork()}"),
    "file_write_outside_scratch": _find(
        "FileIO", "            f = c('%s', 'w')\n            return {'escaped': f.write(b'x')}"
        % PWN.format(7)),
    "file_write_via_os_open": _find(
        "BuiltinImporter", "            p = c.load_module('posix')\n"
        "            fd = p.open('%s', 65)\n            return {'escaped': p.write(fd, b'x')}"
        % PWN.format(8)),
    "socket_connect": _find(
        "BuiltinImporter",
        "            s = c.load_module('_socket')\n            k = s.socket(2, 1)\n"
        "            k.connect(('10.255.255.1', 80))\n            return {'escaped': 'connected'}"),
    "socket_via_extension_loader": WALK + '''
def hook(ctx, nb):
    for c in walk(().__class__.__base__):
        if c.__name__ == "ExtensionFileLoader":
            ldr = c("_socket", %r)
            for d in walk(().__class__.__base__):
                if d.__name__ == "ModuleSpec":
                    m = ldr.create_module(d("_socket", ldr, origin=%r))
                    k = m.socket(2, 1)
                    k.connect(("10.255.255.1", 80))
                    return {"escaped": "connected"}
    return {"note": "not found"}
''' % (_SOCKET_SO, _SOCKET_SO),
    "socket_via_dunder_import": '''
def hook(ctx, nb):
    imp = re.search.__globals__["__builtins__"]["__import__"]
    k = imp("socket").socket(2, 1)
    k.connect(("10.255.255.1", 80))
    return {"escaped": "connected"}
''',
    "parent_environment_os_environ": _find(
        "BuiltinImporter", "            return {'escaped': str(c.load_module('posix').environ)}"),
    "parent_environment_proc": _find(
        "FileIO", "            return {'escaped': str(c('/proc/%d/environ' % ctx.ppid, 'r').read())}"),
    "catastrophic_regex": '''
def hook(ctx, nb):
    return {"escaped": str(re.match("(a+)+$", "a" * 64 + "b"))}
''',
    "memory_bomb_string": '''
def hook(ctx, nb):
    return {"escaped": len("a" * (2 ** 34))}
''',
    "memory_bomb_list": '''
def hook(ctx, nb):
    x = [0] * (10 ** 10)
    return {"escaped": len(x)}
''',
    "long_c_level_loop": '''
def hook(ctx, nb):
    return {"escaped": sum(range(10 ** 13))}
''',
    "long_python_loop": '''
def hook(ctx, nb):
    n = 0
    for i in range(10 ** 12):
        n += i
    return {"escaped": n}
''',
    "deep_recursion": '''
def f(n):
    return f(n + 1) + 1
def hook(ctx, nb):
    return {"escaped": f(0)}
''',
}
# Attacks the lint may legitimately pass (they use only allowed constructs); the worker must
# still contain them.
LINT_CLEAN = {"catastrophic_regex", "memory_bomb_string", "memory_bomb_list",
              "long_c_level_loop", "long_python_loop", "deep_recursion"}


@pytest.fixture(scope="module")
def box():
    os.environ["HJ_SECRET_API_KEY"] = SECRET
    for f in glob.glob(PWN.format("*")):
        os.remove(f)
    b = HookSandbox(SandboxConfig(timeout_s=0.5))
    yield b
    b.close()
    os.environ.pop("HJ_SECRET_API_KEY", None)


def _contained(result):
    return result is None or "escaped" not in result


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_escape_contained(box, name):
    src = ATTACKS[name]
    ctx = {"ppid": os.getpid(), "task": "x"}
    errors = lint_hook_source(src)
    if name not in LINT_CLEAN:
        assert errors, f"the lint should reject {name}"
    linted = run_hook(src, ctx, {}, timeout_s=0.5, sandbox=box)
    raw = box.call(src, ctx, {}, timeout_s=0.5)
    assert linted is None or _contained(linted)
    # a broken attack script proves nothing: it must fail at the boundary, not on its own bug
    assert raw.ok or not raw.error.startswith(("TypeError", "NameError", "SyntaxError")), raw.error
    assert not (raw.ok and raw.result == {"note": "not found"}), f"{name} found no gadget"
    leaked = raw.ok and not _contained(raw.result)
    if leaked:  # information-only walks may "succeed" but must reveal nothing of the host
        assert SECRET not in str(raw.result), f"{name} leaked the parent's environment"
        assert name in ("str_format_attribute_walk", "unbound_str_format",
                        "parent_environment_os_environ"), f"{name} escaped: {raw.result}"
    assert glob.glob(PWN.format("*")) == [], f"{name} wrote a file outside the scratch dir"
    # the sandbox stays usable after every attack
    ok = box.call("def hook(ctx, nb):\n    return {'message': 'alive'}\n", {}, {})
    assert ok.ok and ok.result == {"message": "alive"}


def test_timeouts_kill_and_restart_the_worker(box):
    before = box.stats.timeouts
    pid = box.worker_pid
    out = box.call(ATTACKS["long_c_level_loop"], {}, {}, timeout_s=0.3)
    assert not out.ok and out.timed_out and box.stats.timeouts == before + 1
    assert box.call("def hook(ctx, nb):\n    return {}\n", {}, {}).ok
    assert box.worker_pid != pid


def test_worker_isolation_report(box):
    box.call("def hook(ctx, nb):\n    return {}\n", {}, {})
    iso = box.isolation
    assert iso["audit_hook"] is True
    assert iso["limits"]["as_mb"] == 512 and iso["limits"]["fsize_bytes"] == 0
    if os.getuid() == 0:
        # root drops to nobody, unless the worker already runs in an unprivileged user namespace
        assert iso["uid"] == 65534 or iso["netns"]


def test_without_network_namespace_sockets_stay_blocked():
    """The fallback when the kernel allows no network namespace: the audit hook refuses sockets."""
    with HookSandbox(SandboxConfig(timeout_s=0.5, use_netns=False)) as b:
        for name in ("socket_connect", "socket_via_dunder_import", "socket_via_extension_loader"):
            out = b.call(ATTACKS[name], {}, {})
            assert not out.ok and ("not allowed" in out.error or "ImportError" in out.error)
        assert b.isolation["netns"] is False


def test_pool_isolates_a_hanging_hook_from_other_calls():
    import threading

    from harness_jax.harness.sandbox import HookSandboxPool

    with HookSandboxPool(size=2, config=SandboxConfig(timeout_s=0.5)) as pool:
        hang = threading.Thread(target=pool.call, args=(ATTACKS["long_c_level_loop"], {}, {}),
                                kwargs={"timeout_s": 1.5})
        hang.start()
        try:
            out = pool.call("def hook(ctx, nb):\n    return {'message': 'served'}\n", {}, {})
            # served by the other worker while the first one is still busy
            assert out.ok and out.result == {"message": "served"} and hang.is_alive()
        finally:
            hang.join()
        assert pool.stats.timeouts == 1 and pool.stats.ok == 1


def test_oversized_reply_is_dropped(box):
    src = "def hook(ctx, nb):\n    return {'message': 'x' * (4 * 1024 * 1024)}\n"
    out = box.call(src, {}, {})
    assert not out.ok and "larger than" in out.error
    assert box.call("def hook(ctx, nb):\n    return {}\n", {}, {}).ok


TAMPER = {
    "rewrite_worker_globals": '''
def hook(ctx, nb):
    main = re.search.__globals__["enum"].sys.modules["__main__"]
    main.PermissionError = None
    main.BLOCKED_EVENT_PREFIXES = ()
    return {"escaped": main.os.system("touch %s")}
''' % PWN.format(9),
    "replace_audit_code": '''
def hook(ctx, nb):
    main = re.search.__globals__["enum"].sys.modules["__main__"]
    main._audit.__code__ = (lambda e, a: None).__code__
    return {"escaped": main.os.system("touch %s")}
''' % PWN.format(10),
    "patch_audit_defaults_and_closure": '''
def hook(ctx, nb):
    main = re.search.__globals__["enum"].sys.modules["__main__"]
    main._audit.__defaults__ = ((),)
    for c in (main._audit.__closure__ or ()):
        c.cell_contents = ()
    return {"escaped": main.os.system("touch %s")}
''' % PWN.format(11),
    "hijack_other_hooks": '''
def hook(ctx, nb):
    main = re.search.__globals__["enum"].sys.modules["__main__"]
    main.json.dumps = lambda *a, **k: '{"id": 1, "ok": true, "result": {"escaped": 1}}'
    return {"escaped": "installed"}
''',
}


@pytest.mark.parametrize("name", sorted(TAMPER))
def test_worker_audit_hook_cannot_be_disabled(name):
    """Attacks on the worker's own machinery (globals, the audit hook's code/state) from
    unlinted code: the audit hook is tamper-proof, and overlays never share workers."""
    assert lint_hook_source(TAMPER[name])
    with HookSandbox(SandboxConfig(timeout_s=0.5)) as b:
        out = b.call(TAMPER[name], {}, {})
        assert not out.ok or name == "hijack_other_hooks"
        after = b.call("def hook(ctx, nb):\n    return {'message': 'next'}\n", {}, {})
        # a forged reply for a later call is detected (id mismatch) and the worker discarded
        assert after.result != {"escaped": 1}
        assert after.ok or "mismatch" in after.error
        blocked = b.call(ATTACKS["subclass_walk_os_system"], {}, {})
        assert not blocked.ok or "escaped" not in (blocked.result or {})
    assert glob.glob(PWN.format("*")) == []


def test_overlays_get_their_own_workers():
    from harness_jax.harness.overlay import Overlay
    from harness_jax.harness.patches import Patch

    code = "def hook(ctx, nb):\n    return {'message': 'x'}\n"
    p = Patch(actions=[{"type": "add_code_hook", "hook": "make_pre_hint", "code": code}])
    a, b = Overlay(p), Overlay(p)
    try:
        assert a.make_pre_hint({}, {}).result == b.make_pre_hint({}, {}).result == {"message": "x"}
        pids_a = {w.worker_pid for w in a.sandbox.workers} - {None}
        pids_b = {w.worker_pid for w in b.sandbox.workers} - {None}
        assert pids_a and pids_b and not (pids_a & pids_b)
    finally:
        a.close()
        b.close()
