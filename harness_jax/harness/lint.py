"""AST lint of LLM-written hook code (Harness-R1's rule shape, plus a few stricter rules).

This is a *lint*: it rejects mistakes and the obvious escape idioms early and keeps patches
comparable with the published validator. It is NOT the security boundary — hooks always run in
the isolated worker of ``sandbox.py`` — so the rules here favour clear messages over completeness.

Rules: only top-level ``def``s, exactly one ``hook(ctx, nb)`` plus at most five helpers; no
decorators, annotations or nested functions; none of import/class/lambda/while/with/raise/global/
nonlocal/yield/async/await/del; ``try`` only with bare ``except Exception`` (no else/finally); no
name or attribute starting with ``_``; a denylist of names (eval, exec, getattr, type, ...) and of
attributes that walk into interpreter internals (``format``, frame/traceback fields, module
gadgets such as ``re.enum.sys``); no string literal containing a dunder; size limits (source
8,000 chars, 1,200 AST nodes, string literals 700 chars).
"""
from __future__ import annotations

import ast
import builtins
import dataclasses

HOOK_NAMES = ("on_init", "make_pre_hint", "on_before_action", "on_post_step")

ALLOWED_BUILTINS = (
    "abs", "all", "any", "bool", "dict", "enumerate", "Exception", "filter", "float", "int",
    "isinstance", "len", "list", "map", "max", "min", "range", "reversed", "round", "set",
    "sorted", "str", "sum", "tuple", "zip",
)
# Names the hook namespace provides besides the builtins (wrapped, module-free proxies).
NAMESPACE_NAMES = ("math", "re", "SequenceMatcher", "True", "False", "None")

DENIED_NAMES = frozenset({
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "hasattr", "type",
    "object", "globals", "locals", "vars", "dir", "super", "input", "breakpoint", "help",
    "memoryview", "bytearray", "bytes", "classmethod", "staticmethod", "property", "id",
    "format", "print", "exit", "quit", "iter", "next", "callable", "issubclass", "frozenset",
    "slice", "chr", "ord", "ascii", "repr", "hash", "license", "credits", "copyright",
    "BaseException", "SystemExit", "KeyboardInterrupt", "GeneratorExit", "builtins",
    "os", "sys", "subprocess", "socket", "importlib", "ctypes", "gc", "inspect", "pickle",
    "marshal", "shutil", "pathlib", "io", "signal", "resource", "threading", "multiprocessing",
})
DENIED_ATTRIBUTES = frozenset({
    "format", "format_map", "mro", "gi_frame", "gi_code", "gi_yieldframe", "cr_frame",
    "cr_code", "ag_frame", "ag_code", "f_back", "f_globals", "f_locals", "f_builtins",
    "f_code", "tb_frame", "tb_next", "co_code", "co_consts", "func_globals", "func_code",
    "enum", "sys", "os", "modules", "builtins", "copyreg", "functools", "sre_compile",
    "sre_parse", "importlib", "loader", "spec", "system", "popen", "spawn", "fork",
    "environ", "getenv", "putenv", "remove", "unlink", "rmdir", "mkdir", "chmod", "kill",
    "socket", "connect", "subprocess", "load_module", "exec_module",
})
FORBIDDEN_NODES = {
    ast.Import: "import", ast.ImportFrom: "import", ast.ClassDef: "class", ast.Lambda: "lambda",
    ast.While: "while", ast.With: "with", ast.AsyncWith: "async with", ast.Raise: "raise",
    ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Yield: "yield",
    ast.YieldFrom: "yield from", ast.Await: "await", ast.AsyncFunctionDef: "async def",
    ast.AsyncFor: "async for", ast.Delete: "del",
}
if hasattr(ast, "TryStar"):
    FORBIDDEN_NODES[ast.TryStar] = "try/except*"

_BUILTIN_NAMES = frozenset(dir(builtins))

MAX_SOURCE_CHARS = 8000
MAX_AST_NODES = 1200
MAX_STRING_CHARS = 700
MAX_HELPERS = 5


@dataclasses.dataclass(frozen=True)
class LintLimits:
    max_source_chars: int = MAX_SOURCE_CHARS
    max_ast_nodes: int = MAX_AST_NODES
    max_string_chars: int = MAX_STRING_CHARS
    max_helpers: int = MAX_HELPERS


def lint_hook_source(source: str, limits: LintLimits = LintLimits()) -> list[str]:
    """Returns the list of lint errors of one hook's code (empty when it passes)."""
    if not isinstance(source, str):
        return [f"hook code must be a string, got {type(source).__name__}"]
    errors: list[str] = []
    if len(source) > limits.max_source_chars:
        return [f"hook code is {len(source)} chars; the limit is {limits.max_source_chars}"]
    if "\x00" in source:
        return ["hook code contains a NUL byte"]
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as e:
        return [f"hook code does not parse: {e.msg} (line {e.lineno})"]
    n_nodes = sum(1 for _ in ast.walk(tree))
    if n_nodes > limits.max_ast_nodes:
        errors.append(f"hook code has {n_nodes} AST nodes; the limit is {limits.max_ast_nodes}")

    hooks, helpers = [], []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            (hooks if node.name == "hook" else helpers).append(node)
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
              and isinstance(node.value.value, str)):
            continue  # a module docstring
        else:
            errors.append(f"line {getattr(node, 'lineno', '?')}: only top-level function "
                          f"definitions are allowed, found {type(node).__name__}")
    if len(hooks) != 1:
        errors.append(f"hook code must define exactly one 'def hook(ctx, nb)', found {len(hooks)}")
    if len(helpers) > limits.max_helpers:
        errors.append(f"at most {limits.max_helpers} helper functions are allowed, "
                      f"found {len(helpers)}")
    for fn in hooks:
        a = fn.args
        names = [x.arg for x in a.args]
        if names != ["ctx", "nb"] or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            errors.append(f"line {fn.lineno}: the hook's signature must be exactly "
                          "'def hook(ctx, nb)'")
    for fn in hooks + helpers:
        if fn.decorator_list:
            errors.append(f"line {fn.lineno}: decorators are not allowed ({fn.name})")
        if fn.returns is not None or any(x.annotation is not None for x in
                                         fn.args.args + fn.args.kwonlyargs):
            errors.append(f"line {fn.lineno}: annotations are not allowed ({fn.name})")
        for d in fn.args.defaults + [x for x in fn.args.kw_defaults if x is not None]:
            if not isinstance(d, ast.Constant):
                errors.append(f"line {fn.lineno}: default arguments must be constants "
                              f"({fn.name}); keep state in nb, which is per episode")
        for sub in ast.walk(fn):
            if sub is not fn and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                errors.append(f"line {sub.lineno}: nested function definitions are not allowed")

    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        kind = FORBIDDEN_NODES.get(type(node), False)
        if kind is not False:
            errors.append(f"line {line}: '{kind or type(node).__name__}' is not allowed")
        if isinstance(node, ast.AnnAssign):
            errors.append(f"line {line}: annotations are not allowed")
        elif isinstance(node, ast.Try):
            if node.orelse or node.finalbody:
                errors.append(f"line {line}: try may not have else or finally")
            for h in node.handlers:
                if not (isinstance(h.type, ast.Name) and h.type.id == "Exception"):
                    errors.append(f"line {h.lineno}: only 'except Exception' is allowed")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                errors.append(f"line {line}: names may not start with '_' ({node.id})")
            elif node.id in DENIED_NAMES:
                errors.append(f"line {line}: the name '{node.id}' is not allowed")
        elif isinstance(node, ast.arg) and node.arg.startswith("_"):
            errors.append(f"line {line}: names may not start with '_' ({node.arg})")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                errors.append(f"line {line}: attributes may not start with '_' (.{node.attr})")
            elif node.attr in DENIED_ATTRIBUTES:
                errors.append(f"line {line}: the attribute '.{node.attr}' is not allowed")
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("_"):
            errors.append(f"line {line}: names may not start with '_' ({node.name})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            if len(node.value) > limits.max_string_chars:
                errors.append(f"line {line}: string literal of {len(node.value)} chars; the "
                              f"limit is {limits.max_string_chars}")
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if "__" in text:
                errors.append(f"line {line}: string literals may not contain '__'")
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            errors.append(f"line {line}: f-string format specs are not allowed")
        elif isinstance(node, ast.keyword) and node.arg is None:
            errors.append(f"line {line}: '**' argument unpacking is not allowed")
    # builtins outside the allow-list (the worker's namespace holds only the allowed ones)
    bound = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, (ast.Store, ast.Del))}
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    bound |= {h.name for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.name}
    allowed = set(ALLOWED_BUILTINS) | set(NAMESPACE_NAMES)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                and node.id in _BUILTIN_NAMES and node.id not in allowed
                and node.id not in bound and node.id not in DENIED_NAMES):
            errors.append(f"line {node.lineno}: the builtin '{node.id}' is not in the allow-list "
                          f"({', '.join(ALLOWED_BUILTINS)})")
    # de-duplicate, keep order
    seen, out = set(), []
    for e in errors:
        if e not in seen:
            seen.add(e)
            out.append(e)
    return out
