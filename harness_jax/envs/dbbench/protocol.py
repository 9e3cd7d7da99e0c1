"""DBBench interaction protocols: the paper's text protocol (AgentBench v0.2) and the
function-calling one (AgentBench FC), plus AgentBench's answer checks.

Text protocol: the conversation opens with ``TEXT_INSTRUCTION`` (user), ``"Ok."`` (agent) and
the question (user). Every reply must contain ``Action: Operation`` followed by one ```sql
block, or ``Action: Answer`` followed by ``Final Answer: [...]``; parsing uses the published
regexes (``Action: (.*?)\\n``, ```` ```sql\\n([\\s\\S]*?)\\n``` ````, ``\\nFinal Answer:(.*)``).

Function-calling protocol: tools ``execute_sql(query)`` and ``commit_final_answer(answers)``.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import re
from typing import Any, Optional, Sequence

TEXT_INSTRUCTION = """I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer.
your operation should be like this:
Action: Operation
```sql
SELECT * FROM table WHERE condition;
```
You MUST put SQL in markdown format without any other comments. Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then write down:
Action: Answer
Final Answer: ["ANSWER1", "ANSWER2", ...]
DO NOT write this pattern unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
Your input will be raw MySQL response, you have to deal with it by yourself."""

FUNCTION_INSTRUCTION = """You are an agent that answers questions by operating a MySQL database.
Call the tool `execute_sql` with one SQL statement at a time; you will receive the raw MySQL response (the fetched rows, or the error message).
When you know the answer, call `commit_final_answer` with the list of answers. If the question asks you to modify the database, make the change with `execute_sql` first and then call `commit_final_answer` (its answers can be anything in that case).
Your answers must be exactly the same as the correct answer."""

TOOL_SPECS = [
    {"type": "function", "function": {
        "name": "execute_sql",
        "description": "Execute one SQL statement on the MySQL database and return the raw "
                       "result (a list of row tuples) or the error message.",
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string",
                                                "description": "one SQL statement"}},
                       "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "commit_final_answer",
        "description": "Commit the final answer and end the task. For questions that modify "
                       "the database the answers can be anything.",
        "parameters": {"type": "object",
                       "properties": {"answers": {"type": "array", "items": {"type": "string"},
                                                  "description": "the answer values"}},
                       "required": ["answers"]}}},
]

_ACTION_RE = re.compile(r"Action: (.*?)\n")
_SQL_RE = re.compile(r"```sql\n([\s\S]*?)\n```")
_ANSWER_RE = re.compile(r"\nFinal Answer:(.*)")


def question_text(item: dict, protocol: str) -> str:
    """The question turn: v0.2 ``description + "\\n" + add_description``; FC adds labels."""
    desc = item.get("description", "")
    add = item.get("add_description", "")
    if protocol == "text":
        return f"{desc}\n{add}"
    out = ""
    if item.get("evidence"):
        out += f"Evidence about the question: {item['evidence']}\n"
    if add:
        out += f"Additional table information about the question: {add}\n"
    return out + f"Question: {desc}\n"


@dataclasses.dataclass
class ParsedText:
    kind: str                         # "operation" | "answer" | "invalid"
    sql: Optional[str] = None
    answer_text: Optional[str] = None
    error: Optional[str] = None       # why the reply was invalid (explanatory)


def parse_text_action(reply: str) -> ParsedText:
    """Parses one reply of the text protocol with AgentBench's regexes."""
    m = _ACTION_RE.search(reply)
    if m is None:
        return ParsedText("invalid", error=(
            "Your response does not match the required format: write `Action: Operation` on its "
            "own line followed by one ```sql code block, or `Action: Answer` on its own line "
            "followed by a line `Final Answer: [\"ANSWER1\", ...]`."))
    action = m.group(1).strip()
    if action == "Operation":
        s = _SQL_RE.search(reply)
        if s is None:
            return ParsedText("invalid", error=(
                "`Action: Operation` must be followed by one SQL statement in a markdown block: "
                "a line ```sql, the statement, and a closing line ```."))
        sql = s.group(1).strip().replace("\n", " ")
        return ParsedText("operation", sql=sql)
    a = _ANSWER_RE.search(reply)
    if a is None:
        return ParsedText("invalid", error=(
            f"`Action: {action}` is not an operation, and no `Final Answer:` line follows it. "
            "Use `Action: Operation` with a ```sql block, or `Action: Answer` followed by a new "
            "line `Final Answer: [\"ANSWER1\", ...]`."))
    return ParsedText("answer", answer_text=a.group(1))


# --------------------------------------------------------------------------------------------
# Answer checks
# --------------------------------------------------------------------------------------------
def parse_answer_list(answer: Any) -> list:
    """AgentBench v0.2: ``list(eval(answer))``, else ``[answer]``. ``ast.literal_eval`` stands
    in for ``eval`` (same result on literals, no code execution); like the original, a bare
    quoted string becomes the list of its characters."""
    if isinstance(answer, (list, tuple)):
        return list(answer)
    if answer is None:
        return [""]
    text = str(answer).strip()
    try:
        return list(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return [text]


def strict_match(answer: Any, label: Sequence) -> bool:
    """AgentBench v0.2 SELECT check: one value each -> float equality, else exact string
    equality; several -> set equality."""
    ans = parse_answer_list(answer)
    label = list(label)
    if len(ans) == 1 and len(label) == 1:
        try:
            return float(ans[0]) == float(label[0])
        except (TypeError, ValueError):
            return ans[0] == label[0]
    try:
        return set(ans) == set(label)
    except TypeError:  # unhashable values (nested lists)
        return False


_NULLS = {"none", "null", "nan", "", "n/a"}


def _normalise(v: Any) -> str:
    s = "" if v is None else str(v).strip()
    s = s.strip("'\"").strip()
    if s.lower() in _NULLS:
        return "0"
    if s.endswith("%"):
        s = s[:-1].strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def _as_float(s: str) -> Optional[float]:
    try:
        f = float(s)
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def lenient_match(answer: Any, label: Sequence, abs_tol: float = 0.01) -> bool:
    """AgentBench FC check (DBResultProcessor-style): quotes stripped, null-likes -> "0",
    trailing % and thousands separators removed; numbers equal within ``abs_tol``; multiset
    matching for lists, then plain set equality of the normalised strings."""
    ans = [_normalise(a) for a in parse_answer_list(answer)]
    gold = [_normalise(g) for g in label]
    if len(ans) == len(gold):
        unused = list(gold)
        for a in ans:
            fa = _as_float(a)
            hit = None
            for j, g in enumerate(unused):
                fg = _as_float(g)
                if (fa is not None and fg is not None and abs(fa - fg) <= abs_tol) or a == g:
                    hit = j
                    break
            if hit is None:
                break
            unused.pop(hit)
        else:
            return True
    return set(ans) == set(gold)


def h0(protocol: str) -> dict:
    """The base harness H0 (``registry.EnvSpec.h0``), as harness-spec fields: text = AgentBench
    v0.2's opening (the instruction as a user turn, "Ok." from the agent, then the question) with
    raw replies passed on; function = the AgentBench-FC system instruction with the tools."""
    if protocol not in ("text", "function"):
        raise ValueError(f"h0: protocol must be 'text' or 'function', got {protocol!r}")
    if protocol == "text":
        return {"name": "dbbench-H0-text",
                "preamble": [{"role": "user", "content": TEXT_INSTRUCTION},
                             {"role": "assistant", "content": "Ok."}],
                "rules": {"max_turns": 20, "on_unparsable": "pass_raw"}}
    return {"name": "dbbench-H0-function", "system_prompt": FUNCTION_INSTRUCTION,
            "rules": {"max_turns": 20}}
