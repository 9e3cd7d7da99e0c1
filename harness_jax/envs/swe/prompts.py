"""Prompt texts of the SWE environment and of its H0 harness.

The H0 harness follows the structure of OpenHands' CodeAct agent for SWE-bench (a system
message describing the agent, its workspace and how to act through bash and an editor; a user
message with the uploaded repository's location, the issue, and a step-by-step plan: explore,
reproduce, fix, verify, think about edge cases). The wording is the project's own.
"""

SYSTEM_PROMPT = """You are a careful software engineer working in a sandboxed Linux machine.
You solve tasks in a code repository by calling tools: `bash` runs shell commands, \
`str_replace_editor` views and edits files, and `submit` ends the task.

Guidelines:
- The repository is at /testbed. Work there; there is no network access and nothing can be \
installed.
- Prefer small, targeted changes that fix the root cause. Do not edit or delete existing \
tests: hidden tests will check your fix.
- Read the relevant code before changing it. Reproduce a bug before fixing it, and re-run \
your reproduction afterwards.
- Commands that wait for input do not work; run programs non-interactively.
- Long outputs are shortened; use grep -n, head, tail or view_range to look at specific parts.
- When the task is done, call `submit`."""

TEXT_PROTOCOL = """You act by writing exactly one shell command per reply, inside a ```bash \
code block; its output comes back as the next message. To edit files use shell tools (sed, \
cat with a here-document, python). When you are done, reply with a ```bash block that \
contains only `submit`."""

TASK_TEMPLATE = """<uploaded_files>
/testbed
</uploaded_files>
A Python code repository has been uploaded to /testbed (repository: {repo}). Here is an \
issue report about it:

<issue_description>
{problem_statement}
</issue_description>

Change the non-test files under /testbed so that the behaviour described in the issue is \
fixed. The tests are already taken care of: you do not need to write or change any tests.

Suggested steps:
1. Explore the repository to find the code involved.
2. Write a small script that reproduces the problem and run it with `python3`.
3. Edit the source to fix the problem.
4. Run your script again to confirm the fix, and run the existing test suite \
(`python3 -m pytest -q`) to check that nothing else broke.
5. Think about edge cases, then call `submit`."""


def task_prompt(instance: dict) -> str:
    return TASK_TEMPLATE.format(repo=instance.get("repo", "unknown"),
                                problem_statement=instance["problem_statement"].strip())


# Execution rules of the H0 harness (``h0`` below).
H0_MAX_TURNS = 50                  # OpenHands' SWE-Gym runs use 30-100 iterations
H0_EPISODE_TIMEOUT_S = 1800.0
H0_OBSERVATION_MAX_CHARS = 10_000


def h0(protocol: str) -> dict:
    """The base harness H0 (``registry.EnvSpec.h0``), as harness-spec fields: OpenHands
    CodeAct-style system prompt (text protocol: plus the one-bash-block rule), long observations
    cut at ``H0_OBSERVATION_MAX_CHARS``, ``H0_MAX_TURNS`` turns."""
    if protocol not in ("text", "function"):
        raise ValueError(f"h0: protocol must be 'text' or 'function', got {protocol!r}")
    text = SYSTEM_PROMPT + ("" if protocol == "function" else "\n\n" + TEXT_PROTOCOL)
    return {"name": f"swe-H0-{protocol}", "system_prompt": text,
            "observation": {"max_chars": H0_OBSERVATION_MAX_CHARS},
            "rules": {"max_turns": H0_MAX_TURNS, "max_tokens_per_turn": 4096,
                      "episode_timeout_s": H0_EPISODE_TIMEOUT_S}}
