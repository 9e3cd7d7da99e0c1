"""AppWorld's interaction protocol: code cells in, REPL output out.

Text protocol (AppWorld's ReAct agent): the reply carries Python in a fenced block; the first
``python`` (or ``py``/unlabelled) block is executed. Function protocol: one tool,
``execute_python(code)``, rendered in Qwen3.5's XML calling format like every other tool (code
goes verbatim inside ``<parameter=code>``).

``REACT_INSTRUCTION`` mirrors the structure of AppWorld's own ReAct prompt (our wording, not
theirs): the supervisor/assistant framing, the REPL loop, the three API-discovery calls of
``apis.api_docs``, a short worked example of our own, the key rules (read docs first, small steps,
paginate, use the supervisor app for credentials, finish with ``complete_task``), then the
supervisor's identity and the task. The H0 preset in ``harness/presets.py`` is built from it.
"""
from __future__ import annotations

import re
from typing import Optional

TOOL_NAME = "execute_python"

TOOL_SPECS = (
    {"type": "function", "function": {
        "name": TOOL_NAME,
        "description": ("Run a cell of Python code in the AppWorld REPL and return what it printed "
                        "(or the traceback). Variables persist between cells. Call apps through "
                        "`apis.<app>.<api>(...)`; end the task with "
                        "`apis.supervisor.complete_task(...)`."),
        "parameters": {"type": "object",
                       "properties": {"code": {"type": "string",
                                               "description": "The Python code to run."}},
                       "required": ["code"]}}},
)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)

REACT_INSTRUCTION = """I am your supervisor. You are an AI assistant that carries out my everyday tasks on my behalf, entirely on your own, by operating my apps (Spotify, Venmo, SimpleNote, Todoist and others) through their APIs.

You work in a Python REPL, one step at a time: in each reply, write one block of Python code; I run it and show you what it printed (or the error), and you write the next block based on that, until the task is done. The object `apis` gives access to every app: `apis.<app_name>.<api_name>(**arguments)`.

Three calls tell you what exists before you use it:

```python
# the apps you can use
print(apis.api_docs.show_app_descriptions())
# the APIs of one app, e.g. venmo
print(apis.api_docs.show_api_descriptions(app_name='venmo'))
# the full specification of one API, e.g. venmo's login
print(apis.api_docs.show_api_doc(app_name='venmo', api_name='login'))
```

A short example of the loop (task: "How many playlists do I have on Spotify?"):

Step 1, find the credentials:
```python
accounts = apis.supervisor.show_account_passwords()
print(accounts)
```
Step 2, read the API specification before calling it:
```python
print(apis.api_docs.show_api_doc(app_name='spotify', api_name='show_playlist_library'))
```
Step 3, log in and collect every page of results:
```python
password = [a['password'] for a in accounts if a['account_name'] == 'spotify'][0]
token = apis.spotify.login(username=apis.supervisor.show_profile()['email'], password=password)['access_token']
playlists, page = [], 0
while True:
    batch = apis.spotify.show_playlist_library(access_token=token, page_index=page)
    if not batch:
        break
    playlists += batch
    page += 1
print(len(playlists))
```
Step 4, report the answer and finish:
```python
apis.supervisor.complete_task(answer=len(playlists))
```
(The credentials and values in this example are made up; do not reuse them.)

Rules:
1. Reply with exactly one ```python code block per step and close it with ```.
2. Variables you define stay available in later steps.
3. My account passwords, addresses and payment cards are available from the `supervisor` app; use them to log in (usually with my email as the username).
4. Check an API's specification with `apis.api_docs.show_api_doc` before you call it for the first time.
5. Work in small steps and look at the results; make irreversible changes only once you are sure they are right.
6. Many APIs return results in pages: loop over `page_index` until a page comes back empty.
7. Do not ask me anything: decide on your own from what the apps show you.
8. When the task is done, call `apis.supervisor.complete_task()`. If the task asks for information, pass it as the answer, e.g. `apis.supervisor.complete_task(answer=42)`; otherwise pass no answer."""

FUNCTION_INSTRUCTION = REACT_INSTRUCTION.replace(
    "You work in a Python REPL, one step at a time: in each reply, write one block of Python code;",
    f"You work in a Python REPL through the `{TOOL_NAME}` tool, one step at a time: in each reply, "
    f"call `{TOOL_NAME}` with one cell of Python code;").replace(
    "1. Reply with exactly one ```python code block per step and close it with ```.",
    f"1. Call `{TOOL_NAME}` exactly once per step; the code goes in its `code` argument.")

NO_CODE_MESSAGE = ("No Python code was found in your reply. Write the code for the next step in a "
                   "```python code block.")
NO_TOOL_MESSAGE = (f"No tool was called. Call `{TOOL_NAME}` with the Python code of the next step "
                   "in its `code` argument.")


def task_prompt(instruction: str, supervisor: dict) -> str:
    """The first observation: who the supervisor is and the task (as AppWorld's prompt ends)."""
    return (f"My name is {supervisor.get('first_name', '')} {supervisor.get('last_name', '')}. "
            f"My personal email is {supervisor.get('email', '')} and my phone number is "
            f"{supervisor.get('phone_number', '')}.\nTask: {instruction}")


def extract_code(text: str) -> Optional[str]:
    """The code of the first ``python``/``py``/unlabelled fenced block (None if there is none).

    An unterminated final block (generation cut before the closing fence) is not executed."""
    for lang, body in _FENCE.findall(text):
        if lang.lower() in ("python", "py", "python3", "ipython", ""):
            return body.strip("\n")
    return None


def h0(protocol: str) -> dict:
    """The base harness H0 (``registry.EnvSpec.h0``), as harness-spec fields: AppWorld's ReAct
    agent, instructions + worked example + the supervisor and task in one user turn (text:
    ```python blocks; literal braces escaped for the task template's ``str.format``); function
    calling: the same as the system prompt with the ``execute_python`` tool. 50 turns."""
    if protocol not in ("text", "function"):
        raise ValueError(f"h0: protocol must be 'text' or 'function', got {protocol!r}")
    if protocol == "text":
        template = (REACT_INSTRUCTION.replace("{", "{{").replace("}", "}}")
                    + "\n\nUsing these APIs, write the code for the first step of this task:"
                    "\n\n{observation}")
        return {"name": "appworld-H0-text", "task_template": template,
                "rules": {"max_turns": 50, "on_unparsable": "pass_raw"}}
    return {"name": "appworld-H0-function", "system_prompt": FUNCTION_INSTRUCTION,
            "rules": {"max_turns": 50}}
