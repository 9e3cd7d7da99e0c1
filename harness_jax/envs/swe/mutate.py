"""SWE-smith-style bug injection: enumerate mutation sites in a Python file, apply one.

Every site lies inside a function (its qualified name is part of the site key, and the split of
an instance is decided by the function, so a held-out bug never sits in a function that training
instances mutate). Edits are surgical: only the bytes of the mutated token or statement change,
so the fixing patch is a small diff, as in a real bug fix.

Kinds (``KINDS``):

* ``flip_comparison``  ``<`` -> ``<=``, ``>=`` -> ``>``, ``==`` -> ``!=``, ``in`` -> ``not in`` ...
* ``flip_operator``    ``+`` <-> ``-``, ``*`` -> ``+``, ``//`` -> ``/``, ``and`` <-> ``or`` ...
* ``off_by_one``       an integer literal in a comparison, arithmetic, index or ``range`` +/- 1
* ``remove_branch``    drops an ``if`` statement (or its ``else`` / one ``elif`` clause)
* ``remove_early_return``  drops an ``if ...: return/raise/continue/break`` guard
* ``swap_arguments``   swaps the first two positional arguments of a call
* ``wrong_default``    changes a literal default value (bool negated, int + 1, str emptied)
* ``negate_condition`` ``if cond`` -> ``if not (cond)``
* ``revert_body``      the function body (docstring kept) becomes ``raise NotImplementedError``
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Iterator, Optional

KINDS = ("flip_comparison", "flip_operator", "off_by_one", "remove_branch",
         "remove_early_return", "swap_arguments", "wrong_default", "negate_condition",
         "revert_body")

_CMP_FLIP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="),
             ast.GtE: (">=", ">"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="),
             ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"), ast.Is: ("is", "is not"),
             ast.IsNot: ("is not", "is")}
_BIN_FLIP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "+"),
             ast.FloorDiv: ("//", "/"), ast.Div: ("/", "//"), ast.Mod: ("%", "//"),
             ast.Pow: ("**", "*")}
_BOOL_FLIP = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


class MutationError(ValueError):
    """The site does not exist in this source, or the edit would not give valid code."""


@dataclasses.dataclass(frozen=True)
class Site:
    path: str        # file path relative to the repository root
    function: str    # qualified name of the enclosing function
    kind: str
    index: int       # ordinal among the file's sites of this kind
    lineno: int

    @property
    def key(self) -> str:
        return f"{self.path}::{self.function}::{self.kind}::{self.index}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Edit:
    start: tuple           # (lineno, col) in UTF-8 bytes, like the ast
    end: tuple
    text: str


class _Source:
    """Byte-offset arithmetic over a source text (ast columns are UTF-8 byte offsets)."""

    def __init__(self, source: str):
        self.source = source
        self.data = source.encode("utf-8")
        self.lines = self.data.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + col

    def segment(self, start: tuple, end: tuple) -> str:
        return self.data[self.offset(*start):self.offset(*end)].decode("utf-8")

    def line(self, lineno: int) -> str:
        return self.lines[lineno - 1].decode("utf-8")


def _span(node) -> tuple:
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


class _Finder(ast.NodeVisitor):
    """Yields (kind, payload, qualname, lineno) in a fixed depth-first order."""

    def __init__(self, src: _Source):
        self.src = src
        self.stack: list[str] = []
        self.in_function = 0
        self.found: list[tuple] = []

    def add(self, kind, lineno, edits_fn):
        if self.in_function:
            self.found.append((kind, ".".join(self.stack), lineno, edits_fn))

    # -- scopes ---------------------------------------------------------------------------
    def visit_ClassDef(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        self.in_function += 1
        self._defaults(node)
        self._revert(node)
        for stmt_list in (node.body,):
            self._block(stmt_list)
        for child in node.body:
            self.visit(child)
        self.in_function -= 1
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    # -- statements -------------------------------------------------------------------------
    def _block(self, body):
        """remove_branch / remove_early_return / negate_condition on the ``if``s of a block."""
        for stmt in body:
            if not isinstance(stmt, ast.If) or not self._own_lines(stmt):
                continue
            early = (len(stmt.body) == 1 and isinstance(stmt.body[0], _EXITS)
                     and not stmt.orelse)
            kind = "remove_early_return" if early else "remove_branch"
            self.add(kind, stmt.lineno, lambda s=stmt, b=body: self._delete_stmt(s, b))
            if stmt.orelse:
                self.add("remove_branch", stmt.lineno,
                         lambda s=stmt: self._delete_orelse(s))
            self.add("negate_condition", stmt.lineno,
                     lambda s=stmt: [_Edit(*_span(s.test),
                                           "not (" + self.src.segment(*_span(s.test)) + ")")])

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if (isinstance(block, list) and block and isinstance(block[0], ast.stmt)
                    and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                              ast.ClassDef, ast.Module))):
                if not (field == "orelse" and isinstance(node, ast.If) and len(block) == 1
                        and isinstance(block[0], ast.If)):
                    self._block(block)
        if isinstance(node, ast.Try):
            for h in node.handlers:
                self._block(h.body)
        super().generic_visit(node)

    def _own_lines(self, stmt) -> bool:
        first = self.src.line(stmt.lineno)
        last = self.src.line(stmt.end_lineno)
        head = first.encode("utf-8")[:stmt.col_offset].decode("utf-8", "replace")
        tail = last.encode("utf-8")[stmt.end_col_offset:].decode("utf-8", "replace")
        return not head.strip() and (not tail.strip() or tail.strip().startswith("#"))

    def _delete_stmt(self, stmt, body) -> list:
        start, end = (stmt.lineno, 0), (stmt.end_lineno + 1, 0)
        if len(body) == 1:
            return [_Edit(start, end, _indent(self.src.line(stmt.lineno)) + "pass\n")]
        return [_Edit(start, end, "")]

    def _delete_orelse(self, stmt) -> list:
        first = stmt.orelse[0]
        line0 = stmt.body[-1].end_lineno + 1
        if isinstance(first, ast.If) and self.src.line(first.lineno).lstrip().startswith("elif"):
            # drop this elif clause; a following elif/else attaches to the outer if
            stop = first.body[-1].end_lineno
            return [_Edit((first.lineno, 0), (stop + 1, 0), "")]
        for ln in range(line0, first.lineno + 1):
            if self.src.line(ln).lstrip().startswith("else"):
                return [_Edit((ln, 0), (stmt.orelse[-1].end_lineno + 1, 0), "")]
        raise MutationError("could not find the else clause")

    def _revert(self, node):
        body = list(node.body)
        doc = (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
               and isinstance(body[0].value.value, str))
        rest = body[1:] if doc else body
        if not rest or rest[0].lineno == node.lineno:
            return
        if len(rest) == 1 and isinstance(rest[0], (ast.Pass, ast.Raise)):
            return

        def edits(rest=rest):
            ind = _indent(self.src.line(rest[0].lineno))
            return [_Edit((rest[0].lineno, 0), (rest[-1].end_lineno + 1, 0),
                          ind + "raise NotImplementedError\n")]
        self.add("revert_body", node.lineno, edits)

    def _defaults(self, node):
        args = node.args
        pos = args.posonlyargs + args.args
        pairs = list(zip(pos[len(pos) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for _, d in pairs:
            if not isinstance(d, ast.Constant):
                continue
            v = d.value
            if isinstance(v, bool):
                new = repr(not v)
            elif isinstance(v, int):
                new = repr(v + 1)
            elif isinstance(v, str) and v:
                new = '""'
            else:
                continue
            self.add("wrong_default", d.lineno, lambda d=d, new=new: [_Edit(*_span(d), new)])

    # -- expressions ------------------------------------------------------------------------
    def _gap_edit(self, left, right, old: str, new: str):
        start, end = (left.end_lineno, left.end_col_offset), (right.lineno, right.col_offset)
        gap = self.src.segment(start, end)
        if old[0].isalpha():
            pattern = r"\b" + r"\s+".join(old.split()) + r"\b"
        else:
            pattern = re.escape(old) + (r"(?![=*/])" if old in ("<", ">", "*", "/") else "")
        m = re.search(pattern, gap)
        if m is None:
            raise MutationError(f"operator {old!r} not found between operands")
        a = self.src.offset(*start) + len(gap[:m.start()].encode("utf-8"))
        b = self.src.offset(*start) + len(gap[:m.end()].encode("utf-8"))
        return [_ByteEdit(a, b, new)]

    def visit_Compare(self, node):
        operands = [node.left] + node.comparators
        for i, op in enumerate(node.ops):
            flip = _CMP_FLIP.get(type(op))
            if flip:
                self.add("flip_comparison", node.lineno,
                         lambda l=operands[i], r=operands[i + 1], f=flip: self._gap_edit(l, r, *f))
        for operand in operands:
            self._literal(operand)
        self.generic_visit(node)

    def visit_BinOp(self, node):
        flip = _BIN_FLIP.get(type(node.op))
        str_left = isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
        if flip and not str_left and not isinstance(node.left, ast.JoinedStr):
            self.add("flip_operator", node.lineno,
                     lambda n=node, f=flip: self._gap_edit(n.left, n.right, *f))
        self._literal(node.left)
        self._literal(node.right)
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        flip = _BOOL_FLIP[type(node.op)]
        self.add("flip_operator", node.lineno,
                 lambda n=node, f=flip: self._gap_edit(n.values[0], n.values[1], *f))
        self.generic_visit(node)

    def visit_Subscript(self, node):
        sl = node.slice
        if isinstance(sl, ast.Slice):
            for part in (sl.lower, sl.upper):
                if part is not None:
                    self._literal(part)
        else:
            self._literal(sl)
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for a in node.args:
                self._literal(a)
        args = node.args
        if (len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2])
                and ast.dump(args[0]) != ast.dump(args[1])):
            self.add("swap_arguments", node.lineno, lambda a=args[0], b=args[1]: [
                _Edit(*_span(a), self.src.segment(*_span(b))),
                _Edit(*_span(b), self.src.segment(*_span(a)))])
        self.generic_visit(node)

    def _literal(self, node):
        """off_by_one on an int literal (also under a unary minus)."""
        target = node
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            target = node.operand
        if (isinstance(target, ast.Constant) and isinstance(target.value, int)
                and not isinstance(target.value, bool)):
            v = target.value
            new = v - 1 if v > 1 else v + 1
            self.add("off_by_one", target.lineno,
                     lambda t=target, new=new: [_Edit(*_span(t), repr(new))])


@dataclasses.dataclass
class _ByteEdit:
    a: int
    b: int
    text: str


def _apply(src: _Source, edits: list) -> str:
    spans = []
    for e in edits:
        if isinstance(e, _ByteEdit):
            spans.append((e.a, e.b, e.text))
        else:
            spans.append((src.offset(*e.start), src.offset(*e.end), e.text))
    out = src.data
    for a, b, text in sorted(spans, reverse=True):
        out = out[:a] + text.encode("utf-8") + out[b:]
    return out.decode("utf-8")


def _find(path: str, source: str) -> tuple[_Source, list]:
    src = _Source(source)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise MutationError(f"{path}: not valid Python ({e})") from e
    finder = _Finder(src)
    finder.visit(tree)
    counters: dict = {}
    sites = []
    for kind, qualname, lineno, fn in finder.found:
        idx = counters.get(kind, 0)
        counters[kind] = idx + 1
        sites.append((Site(path, qualname, kind, idx, lineno), fn))
    return src, sites


def enumerate_sites(path: str, source: str) -> list[Site]:
    """Every mutation site of ``source`` (a file at ``path``), in a fixed order."""
    return [s for s, _ in _find(path, source)[1]]


def apply_site(source: str, site: Site) -> str:
    """``source`` with ``site``'s mutation applied; raises MutationError when the result would
    be unchanged or invalid."""
    src, sites = _find(site.path, source)
    for s, fn in sites:
        if (s.kind, s.index) == (site.kind, site.index):
            if s.function != site.function:
                raise MutationError(f"site {site.key}: the source changed (found {s.function})")
            new = _apply(src, fn())
            try:
                new_tree = ast.parse(new)
            except SyntaxError as e:
                raise MutationError(f"site {site.key}: mutation gives invalid code ({e})") from e
            if ast.dump(new_tree) == ast.dump(ast.parse(source)):
                raise MutationError(f"site {site.key}: mutation changes nothing")
            return new
    raise MutationError(f"site {site.key} not found in {site.path}")


def all_mutants(path: str, source: str) -> Iterator[tuple[Site, Optional[str]]]:
    """``(site, mutated source or None if the edit is invalid)`` for every site, parsing the
    file once (``apply_site`` re-parses per call)."""
    src, sites = _find(path, source)
    before = ast.dump(ast.parse(source))
    for site, fn in sites:
        try:
            new = _apply(src, fn())
            ok = ast.dump(ast.parse(new)) != before
        except (MutationError, SyntaxError):
            ok = False
        yield site, (new if ok else None)


def iter_project_sites(files: dict, package_prefixes: Optional[tuple] = None) -> Iterator[Site]:
    """Sites of every non-test Python file of a project (``files``: path -> text)."""
    for path in sorted(files):
        if not path.endswith(".py") or is_test_path(path):
            continue
        if package_prefixes and not path.startswith(package_prefixes):
            continue
        yield from enumerate_sites(path, files[path])


def is_test_path(path: str) -> bool:
    """Test files and test configuration: never mutated, and restored before grading."""
    name = path.rsplit("/", 1)[-1]
    return (path.startswith("tests/") or "/tests/" in path or name.startswith("test_")
            or name == "conftest.py")
