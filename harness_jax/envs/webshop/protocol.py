"""WebShop's two AgentBench protocols.

**Text (AgentBench v0.2).** The conversation opens with the instruction as a user turn, the
agent's ``"Ok."``, then a one-shot example (search -> click a product -> click an option ->
buy); every user turn is ``"Observation:\\n<page>\\n\\nAvailable Actions:\\n<dict>"``, the
dict being Python's rendering of ``{'has_search_bar': ..., 'clickables': [...]}``. The action
is read with AgentBench's regex ``[Aa]ction: *\\n* *((search|click)\\[.+?])``; 10 rounds.

**Function calling (AgentBench FC).** A system instruction, then ``"The initial
observation:\\n<page>\\n\\nAvailable Actions:\\n<dict>"``; tools ``search_action(keywords)`` and
``click_action(value)``; each tool result is ``"Action: <action>\\n\\nObservation:\\n<page>
\\n\\nAvailable Actions:\\n<dict>"``; the first argument value of the call is used, whatever its
name (as AgentBench does); 20 rounds.

The instruction texts and the one-shot example are written for this project (same protocol,
same format, our own wording and our own example product); a user who needs AgentBench's exact
wording can pass it as a harness spec.
"""
from __future__ import annotations

import re
from typing import Optional

TEXT_ROUNDS = 10
FUNCTION_ROUNDS = 20

TEXT_INSTRUCTION = """You are shopping in an online store on behalf of a customer.
The customer's instruction tells you what to buy. Every round you see the current page (the observation) and the actions available on it, and you answer with one action.
You may search when the page has a search bar, and you may click any of the listed clickables.
An action has one of these two forms:
search[keywords]
click[value]
An action that is not valid does nothing.
You choose the search keywords yourself; the value of a click must be one of the available clickables.
Choose your search keywords carefully.
Answer in this format:

Thought:
I think ...

Action:
click[something]"""

FUNCTION_INSTRUCTION = """You are shopping in an online store on behalf of a customer.
The customer's instruction tells you what to buy. Every round you see the current page (the observation) and a list of available actions; answer by calling one of the tools.
Use the search tool when the page has a search bar. Click one of the listed clickables with the click tool; a click value must be one of the available clickables, and an action that is not valid does nothing.
Choose your search keywords carefully.
Think about what to do first, then call a tool. Always call a tool: you need no permission from the customer to use any of them."""

TOOL_SPECS = [
    {"type": "function", "function": {
        "name": "search_action",
        "description": "Search the store with the given keywords.",
        "parameters": {"type": "object",
                       "properties": {"keywords": {"type": "string",
                                                   "description": "the search keywords"}},
                       "required": ["keywords"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "click_action",
        "description": "Click a button, product link or option on the current page.",
        "parameters": {"type": "object",
                       "properties": {"value": {"type": "string",
                                                "description": "one of the available "
                                                               "clickables"}},
                       "required": ["value"], "additionalProperties": False}}},
]

# The one-shot example: our own product, rendered in the environment's format.
_EX_INSTR = ("i need a gluten free dark roast ground coffee with size: 12 ounce, and price "
             "lower than 30.00 dollars")
_EX_ITEM = (f"Instruction: [SEP] {_EX_INSTR} [SEP] Back to Search [SEP] < Prev [SEP] size "
            "[SEP] 12 ounce [SEP] 24 ounce [SEP] Brimora Dark Roast Ground Coffee, Gluten Free "
            "[SEP] Price: $14.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] "
            "Reviews [SEP] Buy Now")
_EX_ITEM_ACTIONS = ("{'has_search_bar': False, 'clickables': ['back to search', '< prev', "
                    "'description', 'features', 'reviews', 'buy now', '12 ounce', '24 ounce']}")
ONE_SHOT = (
    ("user", f"Observation:\nWebShop [SEP] Instruction: [SEP] {_EX_INSTR} [SEP] Search\n\n"
             "Available Actions:\n{'has_search_bar': True, 'clickables': ['search']}"),
    ("assistant", "Thought:\nI think I should search for the coffee the customer wants.\n\n"
                  "Action:\nsearch[gluten free dark roast ground coffee 12 ounce]"),
    ("user", f"Observation:\nInstruction: [SEP] {_EX_INSTR} [SEP] Back to Search [SEP] Page 1 "
             "(Total results: 3) [SEP] Next > [SEP] B0C7XK2M9Q [SEP] Brimora Dark Roast Ground "
             "Coffee, Gluten Free [SEP] $14.99 [SEP] B09RT4WQ2L [SEP] Kafeno Organic Medium Roast "
             "Coffee [SEP] $22.5 [SEP] B07ZPL8N3D [SEP] Solvi Dark Roast Whole Bean Coffee, Fair "
             "Trade [SEP] $31.2\n\nAvailable Actions:\n{'has_search_bar': False, 'clickables': "
             "['back to search', 'next >', 'b0c7xk2m9q', 'b09rt4wq2l', 'b07zpl8n3d']}"),
    ("assistant", "Thought:\nI think the first result is a gluten free dark roast ground coffee "
                  "within the budget, so I should open it.\n\nAction:\nclick[B0C7XK2M9Q]"),
    ("user", f"Observation:\n{_EX_ITEM}\n\nAvailable Actions:\n{_EX_ITEM_ACTIONS}"),
    ("assistant", "Thought:\nI think I should select the 12 ounce size.\n\n"
                  "Action:\nclick[12 ounce]"),
    ("user", f"Observation:\n{_EX_ITEM}\n\nAvailable Actions:\n{_EX_ITEM_ACTIONS}"),
    ("assistant", "Thought:\nI think the size is selected and the price is under the limit, so "
                  "I should buy it.\n\nAction:\nclick[Buy Now]"),
)


def text_opening() -> list:
    """The v0.2 opening turns before the task: instruction, ``"Ok."``, the one-shot example."""
    msgs = [{"role": "user", "content": TEXT_INSTRUCTION},
            {"role": "assistant", "content": "Ok."}]
    msgs += [{"role": r, "content": c} for r, c in ONE_SHOT]
    return msgs


_TEXT_ACTION = re.compile(r"[Aa]ction: *\n* *((search|click)\[.+?])")


def parse_text_action(reply: str) -> Optional[str]:
    """The WebShop action in a text-protocol reply (AgentBench v0.2's regex), or None."""
    m = _TEXT_ACTION.search(reply or "")
    return m.group(1) if m else None


def action_from_tool_call(name: str, arguments) -> Optional[str]:
    """AgentBench FC: the first argument value of ``search_action``/``click_action`` becomes
    ``search[...]``/``click[...]``; None for anything else."""
    if not isinstance(arguments, dict) or not arguments:
        return None
    value = list(arguments.values())[0]
    if name == "search_action":
        return f"search[{value}]"
    if name == "click_action":
        return f"click[{value}]"
    return None


def observation_message(page: str, available: dict, protocol: str, action: Optional[str] = None,
                        first: bool = False) -> str:
    """The user/tool turn carrying a page (module docstring)."""
    body = f"Observation:\n{page}\n\nAvailable Actions:\n{available}"
    if protocol == "function":
        if first:
            return f"The initial observation:\n{page}\n\nAvailable Actions:\n{available}"
        if action is not None:
            return f"Action: {action}\n\n{body}"
    return body


NO_ACTION_TEXT = ("Your reply has no action. End it with a line 'Action:' followed by "
                  "search[keywords] or click[value].")
NO_TOOL_CALL = "No tool call found. Call search_action or click_action."


def h0(protocol: str) -> dict:
    """The base harness H0 (``registry.EnvSpec.h0``), as harness-spec fields: text = v0.2's
    opening (instruction, "Ok.", the one-shot example; 10 rounds); function = the FC system
    instruction with ``search_action``/``click_action`` (20 rounds)."""
    if protocol not in ("text", "function"):
        raise ValueError(f"h0: protocol must be 'text' or 'function', got {protocol!r}")
    if protocol == "text":
        return {"name": "webshop-H0-text", "preamble": text_opening(),
                "rules": {"max_turns": TEXT_ROUNDS, "on_unparsable": "pass_raw"}}
    return {"name": "webshop-H0-function", "system_prompt": FUNCTION_INSTRUCTION,
            "rules": {"max_turns": FUNCTION_ROUNDS}}
