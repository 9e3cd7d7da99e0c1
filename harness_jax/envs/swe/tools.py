"""The agent's tools, in the style of OpenHands' CodeAct agent and SWE-agent.

* ``bash(command, timeout?)``: one command in the episode's sandbox (``sandbox.Workspace``).
* ``str_replace_editor(command, path, ...)``: ``view`` (a file with line numbers, or a directory
  two levels deep), ``create``, ``str_replace`` (``old_str`` must occur exactly once),
  ``insert`` (after ``insert_line``; 0 = at the top) and ``undo_edit`` (the path's last edit).
  Paths are absolute, under ``/testbed`` or ``/tmp``.
* ``submit()``: ends the episode; the working copy's diff is graded.

The editor works on the host side of the working copy, so every path is resolved strictly:
``..`` cannot leave the copy, and symbolic links are refused (an agent could point one at a
host file). Files it writes are handed to the episode's uid. Every failure becomes an
``ERROR: ...`` observation (``ToolError``), never an exception in the environment.
"""
from __future__ import annotations

import os
import posixpath
import re
import stat
from typing import Optional

from harness_jax.envs.swe.sandbox import TESTBED, Workspace

MAX_VIEW_CHARS = 16_000
SNIPPET_LINES = 4
MAX_FILE_BYTES = 2_000_000

TOOL_SPECS = [
    {"type": "function", "function": {
        "name": "bash",
        "description": (
            "Run a bash command in the repository's sandbox (working directory, exported "
            "variables and files persist between calls; no network access). Commands that "
            "wait for input get end-of-file. Long outputs are cut in the middle. A command "
            "running past `timeout` seconds is killed."),
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The bash command to run."},
            "timeout": {"type": "integer",
                        "description": "Seconds before the command is killed (default 120)."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "str_replace_editor",
        "description": (
            "View, create and edit files. `view` shows a file with line numbers (optionally "
            "`view_range` [start, end], end -1 for the end of the file) or lists a directory "
            "two levels deep. `create` writes a new file (`file_text`); it refuses to overwrite. "
            "`str_replace` replaces `old_str`, which must occur exactly once, with `new_str`. "
            "`insert` inserts `new_str` after line `insert_line` (0 inserts at the top). "
            "`undo_edit` reverts the last edit of `path`. Paths must be absolute, e.g. "
            "/testbed/pkg/module.py."),
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string",
                        "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
            "path": {"type": "string", "description": "Absolute path of a file or directory."},
            "file_text": {"type": "string", "description": "Content for `create`."},
            "old_str": {"type": "string", "description": "Exact text to replace."},
            "new_str": {"type": "string",
                        "description": "Replacement (`str_replace`) or text to insert."},
            "insert_line": {"type": "integer", "description": "Line after which to insert."},
            "view_range": {"type": "array", "items": {"type": "integer"},
                           "description": "[start, end] lines for `view` (1-based)."}},
            "required": ["command", "path"]}}},
    {"type": "function", "function": {
        "name": "submit",
        "description": ("Finish: submit the current state of /testbed. Your changes are graded "
                        "by the project's tests."),
        "parameters": {"type": "object", "properties": {}, "required": []}}},
]
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOL_SPECS)
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")


class ToolError(Exception):
    """A tool call that cannot be carried out; its message becomes the observation."""


def numbered(text: str, start: int = 1) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, start))


def _cap(text: str, limit: int = MAX_VIEW_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + ("\n<response clipped: use view_range or grep -n to see specific "
                           "parts>")


class Editor:
    """``str_replace_editor`` on one workspace (keeps the per-path undo history)."""

    def __init__(self, ws: Workspace):
        self.ws = ws
        self.history: dict[str, list[Optional[str]]] = {}

    # -- paths ---------------------------------------------------------------------------
    def _resolve(self, path) -> tuple[str, str]:
        if not isinstance(path, str) or not path.strip():
            raise ToolError("`path` must be a non-empty string")
        path = path.strip()
        if not path.startswith("/"):
            raise ToolError(f"the path {path!r} is not absolute; did you mean "
                            f"{posixpath.join(TESTBED, path)}?")
        norm = posixpath.normpath(path)
        host = self.ws.host_path(norm)
        if host is None:
            raise ToolError(f"{path}: only files under {TESTBED} (and /tmp) can be used")
        base = self.ws.testbed if norm == TESTBED or norm.startswith(TESTBED + "/") \
            else self.ws.tmp
        cur = base
        for part in os.path.relpath(host, base).split(os.sep):
            if part in ("", "."):
                continue
            cur = os.path.join(cur, part)
            if os.path.islink(cur):
                raise ToolError(f"{path}: symbolic links are not followed by the editor; "
                                "use bash for this path")
        return norm, host

    def _read(self, host: str, shown: str) -> str:
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            raise ToolError(f"the path {shown} does not exist") from None
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{shown} is a directory; only `view` works on directories")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{shown} is not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ToolError(f"{shown} is too large for the editor ({st.st_size} bytes); use bash")
        fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{shown} is not a UTF-8 text file") from None

    def _write(self, host: str, text: str) -> None:
        if len(text.encode("utf-8")) > MAX_FILE_BYTES:
            raise ToolError("file_text is too large for the editor")
        parent = os.path.dirname(host)
        if not os.path.isdir(parent) or os.path.islink(parent):
            raise ToolError(f"the directory {parent.replace(self.ws.testbed, TESTBED)} does not "
                            "exist; create it with bash (mkdir -p) first")
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, text.encode("utf-8"))
            os.fchown(fd, self.ws.uid, self.ws.uid)
        finally:
            os.close(fd)

    # -- commands ------------------------------------------------------------------------
    def __call__(self, args: dict) -> str:
        command = args.get("command")
        if command not in EDITOR_COMMANDS:
            raise ToolError(f"unknown command {command!r}; use one of {', '.join(EDITOR_COMMANDS)}")
        shown, host = self._resolve(args.get("path"))
        return getattr(self, "_" + command)(shown, host, args)

    def _view(self, shown, host, args) -> str:
        if os.path.isdir(host) and not os.path.islink(host):
            if args.get("view_range") is not None:
                raise ToolError("view_range only applies to files")
            out = []
            base_depth = host.rstrip("/").count("/")
            for dirpath, dirnames, filenames in os.walk(host):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                                     and d != "__pycache__")
                depth = dirpath.rstrip("/").count("/") - base_depth
                if depth >= 2:
                    dirnames[:] = []
                rel = shown.rstrip("/") + dirpath[len(host.rstrip("/")):]
                out.append(rel + "/")
                if depth < 2:
                    out += [posixpath.join(rel, f) for f in sorted(filenames)
                            if not f.startswith(".")]
            return _cap(f"Files and directories up to 2 levels deep in {shown}:\n" +
                        "\n".join(out))
        text = self._read(host, shown)
        vr = args.get("view_range")
        if vr is None:
            return _cap(f"Here's the result of running `cat -n` on {shown}:\n" + numbered(text))
        if (not isinstance(vr, (list, tuple)) or len(vr) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in vr)):
            raise ToolError("view_range must be a list of two integers [start, end]")
        lines = text.split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        start, end = vr
        if start < 1 or start > max(n, 1):
            raise ToolError(f"view_range start {start} is outside the file's lines 1..{n}")
        if end == -1:
            end = n
        if end < start or end > n:
            raise ToolError(f"view_range end {end} must be -1 or within {start}..{n}")
        body = "\n".join(lines[start - 1:end]) + "\n"
        return _cap(f"Here's the result of running `cat -n` on {shown}:\n" +
                    numbered(body, start))

    def _create(self, shown, host, args) -> str:
        text = args.get("file_text")
        if not isinstance(text, str):
            raise ToolError("`create` needs `file_text` (a string)")
        if os.path.lexists(host):
            raise ToolError(f"{shown} already exists; `create` never overwrites (use "
                            "`str_replace`, or remove the file with bash first)")
        self._write(host, text)
        self.history.setdefault(host, []).append(None)
        return f"File created successfully at: {shown}"

    def _str_replace(self, shown, host, args) -> str:
        old = args.get("old_str")
        new = args.get("new_str", "")
        if not isinstance(old, str) or old == "":
            raise ToolError("`str_replace` needs a non-empty `old_str`")
        if not isinstance(new, str):
            raise ToolError("`new_str` must be a string")
        text = self._read(host, shown)
        count = text.count(old)
        if count == 0:
            raise ToolError(f"No replacement was performed: old_str did not appear verbatim in "
                            f"{shown}.")
        if count > 1:
            lines = [text[:m.start()].count("\n") + 1 for m in re.finditer(re.escape(old), text)]
            raise ToolError(f"No replacement was performed: old_str occurs {count} times in "
                            f"{shown} (lines {lines}); make it unique.")
        self.history.setdefault(host, []).append(text)
        new_text = text.replace(old, new)
        self._write(host, new_text)
        line = text[:text.index(old)].count("\n")
        return self._snippet(shown, new_text, line, new.count("\n"), "edited")

    def _insert(self, shown, host, args) -> str:
        at = args.get("insert_line")
        new = args.get("new_str")
        if not isinstance(at, int) or isinstance(at, bool):
            raise ToolError("`insert` needs `insert_line` (an integer)")
        if not isinstance(new, str):
            raise ToolError("`insert` needs `new_str` (a string)")
        text = self._read(host, shown)
        lines = text.split("\n")
        trailing = lines and lines[-1] == ""
        if trailing:
            lines = lines[:-1]
        if not 0 <= at <= len(lines):
            raise ToolError(f"insert_line {at} is outside 0..{len(lines)}")
        ins = new.split("\n")
        if ins and ins[-1] == "" and len(ins) > 1:
            ins = ins[:-1]
        self.history.setdefault(host, []).append(text)
        new_text = "\n".join(lines[:at] + ins + lines[at:]) + "\n"
        self._write(host, new_text)
        return self._snippet(shown, new_text, at, len(ins) - 1, "edited")

    def _undo_edit(self, shown, host, args) -> str:
        stack = self.history.get(host)
        if not stack:
            raise ToolError(f"No edit history found for {shown}.")
        prev = stack.pop()
        if prev is None:
            if os.path.lexists(host) and not os.path.islink(host):
                os.unlink(host)
            return f"Last edit to {shown} undone successfully (the file was removed)."
        self._write(host, prev)
        return f"Last edit to {shown} undone successfully.\n" + \
            _cap(numbered(prev))

    @staticmethod
    def _snippet(shown, text, line0, extra, verb) -> str:
        lines = text.split("\n")
        a = max(0, line0 - SNIPPET_LINES)
        b = min(len(lines), line0 + extra + SNIPPET_LINES + 1)
        snip = "\n".join(lines[a:b]) + "\n"
        return (f"The file {shown} has been {verb}. Here's the result of running `cat -n` on a "
                f"snippet of {shown}:\n{numbered(snip, a + 1)}\nReview the changes and make "
                "sure they are as expected. Edit the file again if necessary.")


_BASH_BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.S)


def parse_text_action(reply: str) -> tuple[Optional[str], Optional[str]]:
    """Text protocol: ``(command, error)`` from the reply's last ```bash block; the command
    ``submit`` finishes the episode."""
    body = reply.rsplit("</think>", 1)[-1]
    blocks = _BASH_BLOCK.findall(body)
    if not blocks:
        return None, ("No command found. Put exactly one bash command in a ```bash code block, "
                      "or reply with a ```bash block containing `submit` when you are done.")
    cmd = blocks[-1].strip()
    if not cmd:
        return None, "The ```bash block is empty."
    return cmd, None
