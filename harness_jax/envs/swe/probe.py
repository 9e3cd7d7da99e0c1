"""Replays one test function statement by statement and reports where and how it fails.

Run as ``python probe.py SPEC_JSON`` with the repository root as the working directory (trusted
corpus trees only: the generator uses it to write problem statements). It imports nothing from
harness_jax. Output: one JSON object on stdout.

SPEC: ``{"file", "function", "class"?, "param_index"?, "stop_at"?}``. Without ``stop_at`` the
probe finds the first failing statement (trying every parametrize case unless ``param_index``
is given); with ``stop_at`` it runs the statements before it and reports what the statement at
``stop_at`` observes (the left side of an assert, the exception raised, the value computed):
run on the correct tree, that is the expected behaviour.
"""
import ast
import importlib.util
import itertools
import json
import os
import pathlib
import re
import sys
import tempfile

MAX_REPR = 300


def _repr(value):
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + "..."


def _exc(e):
    msg = str(e)
    if len(msg) > MAX_REPR:
        msg = msg[:MAX_REPR] + "..."
    return {"type": type(e).__name__, "message": msg}


def _load(path):
    spec = importlib.util.spec_from_file_location("_hj_probe_" + re.sub(r"\W", "_", path), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _find_def(tree, function, cls):
    body = tree.body
    if cls:
        for node in body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                body = node.body
                break
        else:
            return None
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            return node
    return None


def _param_cases(fn):
    marks = [m for m in getattr(fn, "pytestmark", []) if getattr(m, "name", "") == "parametrize"]
    if not marks:
        return [{}]
    per_mark = []
    for m in marks:
        names = m.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        cases = []
        for values in m.args[1]:
            values = getattr(values, "values", values)   # pytest.param(...)
            if len(names) == 1:
                values = (values,)
            cases.append(dict(zip(names, values)))
        per_mark.append(cases)
    out = []
    for combo in itertools.product(*per_mark):
        d = {}
        for c in combo:
            d.update(c)
        out.append(d)
    return out


def _raises_item(stmt):
    if not isinstance(stmt, ast.With) or len(stmt.items) != 1:
        return None
    ctx = stmt.items[0].context_expr
    if (isinstance(ctx, ast.Call) and isinstance(ctx.func, ast.Attribute)
            and ctx.func.attr == "raises"):
        return ctx
    return None


def _eval(node, ns):
    return eval(compile(ast.Expression(node), "<probe>", "eval"), ns)


def _exec(stmts, ns):
    exec(compile(ast.Module(body=list(stmts), type_ignores=[]), "<probe>", "exec"), ns)


def _observe(stmt, ns):
    """What the statement observes: (ok, info)."""
    if isinstance(stmt, ast.Assert):
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left = _eval(test.left, ns)
            right = _eval(test.comparators[0], ns)
            ns["__hj_l"], ns["__hj_r"] = left, right
            cmp = ast.Compare(left=ast.Name("__hj_l", ast.Load()), ops=test.ops,
                              comparators=[ast.Name("__hj_r", ast.Load())])
            ok = bool(_eval(ast.fix_missing_locations(cmp), ns))
            return ok, {"kind": "assert", "left": _repr(left), "right": _repr(right)}
        value = _eval(test, ns)
        return bool(value), {"kind": "assert_expr", "value": _repr(value)}
    ctx = _raises_item(stmt)
    if ctx is not None:
        exc_type = _eval(ctx.args[0], ns) if ctx.args else BaseException
        match = None
        for kw in ctx.keywords:
            if kw.arg == "match":
                match = _eval(kw.value, ns)
        body = list(stmt.body)
        value = None
        try:
            if body and isinstance(body[-1], ast.Expr):
                _exec(body[:-1], ns)
                value = _eval(body[-1].value, ns)
            else:
                _exec(body, ns)
        except BaseException as e:   # noqa: BLE001 - reporting any exception is the point
            if isinstance(e, exc_type):
                if match is not None and not re.search(match, str(e)):
                    return False, {"kind": "raises_match", "raised": _exc(e), "match": match}
                return True, {"kind": "raises", "raised": _exc(e)}
            return False, {"kind": "wrong_exception", "raised": _exc(e),
                           "expected_type": getattr(exc_type, "__name__", str(exc_type))}
        return False, {"kind": "no_raise", "value": _repr(value),
                       "expected_type": getattr(exc_type, "__name__", str(exc_type))}
    if isinstance(stmt, ast.Expr):
        return True, {"kind": "value", "value": _repr(_eval(stmt.value, ns))}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        value = _eval(stmt.value, ns)
        _exec([stmt], ns)
        return True, {"kind": "value", "value": _repr(value)}
    _exec([stmt], ns)
    return True, {"kind": "block"}


def _run_case(mod, node, params, stop_at, owner=None):
    ns = dict(vars(mod))
    ns.update(params)
    if owner is not mod:
        ns["self"] = owner
    for arg in node.args.args:
        if arg.arg == "self" or arg.arg in params:
            continue
        if arg.arg == "tmp_path":
            ns["tmp_path"] = pathlib.Path(tempfile.mkdtemp(prefix="hj_probe_"))
        else:
            return {"status": "unsupported", "reason": f"fixture {arg.arg!r}"}
    body = list(node.body)
    first = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                             ast.Constant):
        first = 1
    for i in range(first, len(body)):
        stmt = body[i]
        if stop_at is not None and i < stop_at:
            _exec([stmt], ns)
            continue
        try:
            ok, info = _observe(stmt, ns)
        except BaseException as e:   # noqa: BLE001
            ok, info = False, {"kind": "exception", "raised": _exc(e)}
        info["index"] = i
        if stop_at is not None:
            info["status"] = "observed"
            info["ok"] = ok
            return info
        if not ok:
            info["status"] = "failed"
            return info
    return {"status": "passed"}


def main():
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, os.getcwd())
    path = spec["file"]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    node = _find_def(tree, spec["function"], spec.get("class"))
    if node is None:
        print(json.dumps({"status": "unsupported", "reason": "test function not found"}))
        return
    mod = _load(path)
    owner = getattr(mod, spec["class"])() if spec.get("class") else mod
    fn = getattr(owner, spec["function"])
    cases = _param_cases(fn)
    indices = [spec["param_index"]] if spec.get("param_index") is not None else range(len(cases))
    result = {"status": "passed"}
    for k in indices:
        params = cases[k]
        result = _run_case(mod, node, params, spec.get("stop_at"), owner)
        if result["status"] != "passed":
            result["param_index"] = k if len(cases) > 1 or params else None
            result["params"] = {name: _repr(v) for name, v in params.items()}
            break
    print(json.dumps(result))


if __name__ == "__main__":
    main()
