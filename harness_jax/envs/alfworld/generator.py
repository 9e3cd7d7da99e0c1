"""Generator of ALFWorld ``game.tw-pddl`` problems from what the ``alfworld`` wheel ships.

The real ALFWorld game files (json_2.1.1) are not available offline; the engine is. This module
writes new PDDL problems for the six ALFWorld task types:

* scene: one of the 120 ALFRED floorplans shipped in ``alfworld/gen/layouts``
  (``FloorPlan*-objects.json``: the object and receptacle classes present;
  ``FloorPlan*-openable.json``: receptacle instances with their interaction poses, which become
  the PDDL locations). Receptacle classes present without an instance get one;
* objects: the pickupable classes of the scene, 1-3 instances each, placed into receptacle
  instances that may hold them (``canContain`` from ``alfworld.gen.constants``), with the
  affordances of ``VAL_ACTION_OBJECTS`` (cleanable, heatable, coolable, toggleable, sliceable);
* goal: the PDDL goal and a language template of ``alfworld.gen.goal_library`` for the task
  type, with targets drawn so that the goal is not already satisfied and every appliance it
  needs (sink basin, microwave, fridge, desk lamp) is present.

Each problem is then played by the shipped handcoded expert (``AlfredExpert``, via
``textworld``'s PDDL engine with the ALFRED domain and grammar) and kept only if the expert
wins; its command sequence is stored as ``walkthrough`` (demonstration data). Dynamics and text
are exactly ALFWorld's; only the layouts of objects are synthetic.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import random
import tempfile
from typing import Optional, Sequence

TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep",
              "pick_two_obj_and_place")
# AgentBench's short names (prefixes of the game directories) for per-category metrics
SHORT_NAMES = {"pick_and_place_simple": "put", "look_at_obj_in_light": "examine",
               "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
               "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "puttwo"}
_APPLIANCE = {"pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
              "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
              "pick_cool_then_place_in_recep": ("Fridge", "Coolable")}
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand",
                "CounterTop")


def _require_alfworld():
    try:
        import alfworld  # noqa: F401  (presence check)
        import fast_downward  # noqa: F401
        import textworld  # noqa: F401
    except ImportError as e:
        raise ImportError("the ALFWorld environment needs the packages alfworld and "
                          "textworld[pddl] (pip install alfworld 'textworld[pddl]')") from e


@functools.lru_cache(maxsize=1)
def _assets() -> dict:
    """Domain, grammar and scene inventories from the installed wheel (read once)."""
    _require_alfworld()
    import alfworld
    import alfworld.gen.constants as C
    root = os.path.dirname(alfworld.__file__)
    with open(os.path.join(root, "data", "alfred.pddl")) as f:
        domain = f.read()
    with open(os.path.join(root, "data", "alfred.twl2")) as f:
        grammar = f.read()
    layouts = os.path.join(root, "gen", "layouts")
    scenes = {}
    for name in sorted(os.listdir(layouts)):
        if name.endswith("-objects.json"):
            n = int(name[len("FloorPlan"):-len("-objects.json")])
            with open(os.path.join(layouts, name)) as f:
                objects = json.load(f)
            op = os.path.join(layouts, f"FloorPlan{n}-openable.json")
            openable = {}
            if os.path.exists(op):
                with open(op) as f:
                    openable = json.load(f)
            scenes[n] = (objects, openable)
    return {"domain": domain, "grammar": grammar, "scenes": scenes, "C": C}


def mangle(name: str) -> str:
    """ALFRED's PDDL-safe spelling of an id (``Apple|+01.00|...`` -> ``Apple_bar__plus_01...``);
    ``AlfredDemangler`` reverses it into ``apple 1``."""
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"),
                 (",", "_comma_")):
        name = name.replace(a, b)
    return name


@dataclasses.dataclass
class Problem:
    task_type: str
    floorplan: int
    pddl_params: dict
    goal_desc: str
    pddl_problem: str


def _coord(rng: random.Random) -> str:
    return "|".join(f"{rng.uniform(-3, 3):+06.2f}" for _ in range(3))


def _loc_from_pose(pose) -> str:
    x, z, rot, hor = pose
    return f"loc|{int(round(x / 0.25))}|{int(round(z / 0.25))}|{int(round(rot / 90)) % 4}|{int(hor)}"


def _scene_candidates(task_type: str) -> list:
    a = _assets()
    out = []
    for n, (objects, openable) in a["scenes"].items():
        present = set(objects) | {"SinkBasin" if k.split("|")[0] == "Sink" else k.split("|")[0]
                                  for k in openable}
        if "Sink" in present:
            present.add("SinkBasin")
        if "Bathtub" in present:
            present.add("BathtubBasin")
        if task_type in _APPLIANCE and _APPLIANCE[task_type][0] not in present:
            continue
        if task_type == "look_at_obj_in_light" and not (
                "DeskLamp" in present and any(h in present for h in LAMP_HOLDERS)):
            continue
        out.append(n)
    return out


def build_problem(task_type: str, rng: random.Random, floorplan: Optional[int] = None,
                  max_per_class: int = 3, max_object_classes: int = 8) -> Optional[Problem]:
    """One random problem of ``task_type`` (None when the drawn scene cannot host it).

    ``max_per_class`` caps the receptacle instances of one class (a kitchen has up to 28
    cabinets) and ``max_object_classes`` the distractor object classes: the PDDL engine's cost
    per step grows with the number of admissible commands, so small scenes keep episodes fast.
    The random draws happen in a fixed order (receptacles, targets, placements, PDDL start and
    goal text), so a seed always gives the same problem.
    """
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type={task_type!r}: expected one of {TASK_TYPES}")
    a = _assets()
    C = a["C"]
    import alfworld.gen.goal_library as glib
    if floorplan is None:
        floorplan = rng.choice(_scene_candidates(task_type))
    objects, openable = a["scenes"][floorplan]
    recep_types = set(C.RECEPTACLES) - set(C.MOVABLE_RECEPTACLES)
    placeable = set().union(*C.VAL_RECEPTACLE_OBJECTS.values())
    receps = _receptacles(rng, objects, openable, recep_types, max_per_class)
    if not receps:
        return None
    obj_classes = sorted({o for o in objects if o in placeable and o not in recep_types
                          and "Sliced" not in o})
    holders = {o: [r for r in receps if o in C.VAL_RECEPTACLE_OBJECTS.get(r[1], ())]
               for o in obj_classes}
    obj_classes = [o for o in obj_classes if holders[o]]
    target = _targets(task_type, rng, C, receps, obj_classes, holders)
    if target is None:
        return None
    params, parent = target
    placements = _placements(task_type, rng, receps, obj_classes, holders, params["object_target"],
                             parent, max_object_classes)
    problem = _pddl(rng, C, receps, placements, params, placeable) + "\n" + glib.gdict[task_type]["pddl"].format(
        obj=params["object_target"], recep=params["parent_target"],
        toggle=params["toggle_target"], mrecep=params["mrecep_target"]).replace("#", "-")
    template = rng.choice(glib.gdict[task_type]["templates"])
    desc = template.format(obj=params["object_target"].lower(),
                           recep=params["parent_target"].lower(),
                           toggle=params["toggle_target"].lower(),
                           mrecep=params["mrecep_target"].lower())
    return Problem(task_type, floorplan, params, desc, problem)


def _receptacles(rng: random.Random, objects, openable, recep_types: set, max_per_class: int) -> list:
    """Receptacle instances ``(id, class, location)``: the scene's openable ones (at most
    ``max_per_class`` per class) plus the receptacle classes the scene lists without a pose."""
    receps = []
    for rid, pose in sorted(openable.items()):
        cls = rid.split("|")[0]
        if cls in ("Sink", "Bathtub"):  # ALFRED's basin ids: Sink|x|y|z|SinkBasin
            cls = cls + "Basin"
            rid = f"{rid}|{cls}"
        if cls in recep_types:
            receps.append((rid, cls, _loc_from_pose(pose)))
    by_class: dict = {}
    for r in receps:
        by_class.setdefault(r[1], []).append(r)
    receps = []
    for cls in sorted(by_class):
        group = by_class[cls]
        receps += sorted(rng.sample(group, min(len(group), max_per_class)))
    present_r = {c for _, c, _ in receps}
    extra = sorted({("SinkBasin" if o == "Sink" else "BathtubBasin" if o == "Bathtub" else o)
                    for o in objects} & recep_types - present_r)
    for cls in extra:
        for _ in range(3 if cls == "StoveBurner" else 1):
            pose = (rng.randint(-12, 12) * 0.25, rng.randint(-12, 12) * 0.25,
                    rng.choice([0, 90, 180, 270]), rng.choice([0, 30, 45, 60]))
            rid = (f"{cls[:-5]}|{_coord(rng)}|{cls}" if cls.endswith("Basin")
                   else f"{cls}|{_coord(rng)}")
            receps.append((rid, cls, _loc_from_pose(pose)))
    return receps


def _targets(task_type: str, rng: random.Random, C, receps: list, obj_classes: list, holders: dict):
    """``(params, parent class or None)`` of the task's goal, or None when the scene cannot host
    it (no lamp holder, or no object placeable outside some goal receptacle class)."""
    params = {"object_target": "", "parent_target": "", "toggle_target": "",
              "mrecep_target": "", "object_sliced": False}
    if task_type == "look_at_obj_in_light":
        lamp_holders = [r for r in receps if r[1] in LAMP_HOLDERS]
        if not lamp_holders or not obj_classes:
            return None
        params.update(object_target=rng.choice(obj_classes), toggle_target="DeskLamp")
        return params, None
    r_classes = sorted({c for _, c, _ in receps})
    need = _APPLIANCE.get(task_type, (None, None))
    pool = [o for o in obj_classes if need[1] is None or o in C.VAL_ACTION_OBJECTS[need[1]]]
    rng.shuffle(pool)
    for obj in pool:
        parents = [c for c in r_classes if obj in C.VAL_RECEPTACLE_OBJECTS.get(c, ()) and c != need[0]]
        # some instance of obj must be placeable outside the goal receptacle class
        parents = [p for p in parents if any(h[1] != p for h in holders[obj])]
        if parents:
            parent = rng.choice(parents)
            params.update(object_target=obj, parent_target=parent)
            return params, parent
    return None


def _placements(task_type: str, rng: random.Random, receps: list, obj_classes: list, holders: dict,
                target: str, parent: Optional[str], max_object_classes: int) -> list:
    """Objects placed in receptacles ``(obj_id, class, recep)``: the target class (never in
    the goal receptacle class) plus a few distractor classes, and the desk lamp of a light task."""
    distractors = [o for o in obj_classes if o != target]
    rng.shuffle(distractors)
    placements = []
    for o in sorted(distractors[:max_object_classes] + [target]):
        n = rng.randint(1, 2)
        allowed = holders[o]
        if o == target:
            n = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
            if parent is not None:
                allowed = [h for h in allowed if h[1] != parent]
        for _ in range(n):
            placements.append((f"{o}|{_coord(rng)}", o, rng.choice(allowed)))
    if task_type == "look_at_obj_in_light":
        holder = rng.choice([r for r in receps if r[1] in LAMP_HOLDERS])
        placements.append((f"DeskLamp|{_coord(rng)}", "DeskLamp", holder))
    return placements


def _pddl(rng: random.Random, C, receps: list, placements: list, params: dict, placeable: set) -> str:
    """The problem's PDDL objects and initial state (the goal is appended by the caller)."""
    M = mangle
    r_classes = sorted({c for _, c, _ in receps})
    start = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.randint(0, 3)}|30"
    locations = sorted({r[2] for r in receps} | {start})
    # only the types this problem mentions are declared (fewer constants: faster grounding)
    otypes = sorted({c for _, c, _ in placements} | {"Knife", "ButterKnife"})
    rtypes = sorted(set(r_classes) | {"SinkBasin", "Microwave", "Fridge"}
                    | ({params["parent_target"]} if params["parent_target"] else set()))
    lines = ["(define (problem plan_harness_jax)", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{t}Type - otype" for t in otypes]
    lines += [f"{t}Type - rtype" for t in rtypes]
    lines += [f"{M(oid)} - object" for oid, _, _ in placements]
    lines += [f"{M(rid)} - receptacle" for rid, _, _ in receps]
    lines += [f"{M(loc)} - location" for loc in locations]
    lines += [")", "(:init", f"(atLocation agent1 {M(start)})"]
    for rid, cls, loc in receps:
        lines.append(f"(receptacleType {M(rid)} {cls}Type)")
        lines.append(f"(receptacleAtLocation {M(rid)} {M(loc)})")
        if cls in C.OPENABLE_CLASS_SET:
            lines.append(f"(openable {M(rid)})")
    present_o = {c for _, c, _ in placements}
    for rc in r_classes:
        for oc in sorted(present_o & set(C.VAL_RECEPTACLE_OBJECTS.get(rc, ()))):
            lines.append(f"(canContain {rc}Type {oc}Type)")
    for oid, cls, (rid, _, loc) in placements:
        lines.append(f"(objectType {M(oid)} {cls}Type)")
        lines.append(f"(inReceptacle {M(oid)} {M(rid)})")
        lines.append(f"(objectAtLocation {M(oid)} {M(loc)})")
        if cls in placeable:
            lines.append(f"(pickupable {M(oid)})")
        for aff, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"),
                          ("Coolable", "coolable"), ("Toggleable", "toggleable"),
                          ("Sliceable", "sliceable")):
            if cls in C.VAL_ACTION_OBJECTS[aff]:
                lines.append(f"({pred} {M(oid)})")
    lines.append(")")
    return "\n".join(lines)


def game_data(record: dict) -> dict:
    """The ``game.tw-pddl`` JSON of a generated record (domain and grammar from the wheel)."""
    a = _assets()
    return {"pddl_domain": a["domain"],
            "grammar": a["grammar"].replace("UNKNOWN GOAL", record["goal_desc"]),
            "pddl_problem": record["pddl_problem"], "solvable": bool(record.get("solvable"))}


def write_game(record: dict, directory: str) -> str:
    """Writes ``game.tw-pddl`` and ``traj_data.json`` (what ``AlfredTWEnv`` and the handcoded
    expert read) into ``directory``; returns the game file path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "game.tw-pddl")
    data = game_data(record)
    if record.get("walkthrough"):
        data["walkthrough"] = list(record["walkthrough"])
    with open(path, "w") as f:
        json.dump(data, f)
    with open(os.path.join(directory, "traj_data.json"), "w") as f:
        json.dump({"task_type": record["task_type"], "pddl_params": record["pddl_params"],
                   "scene": {"floor_plan": f"FloorPlan{record['floorplan']}"},
                   "turk_annotations": {"anns": [{"task_desc": record["goal_desc"]}]}}, f)
    return path


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def run_expert(record: dict, max_steps: int = 80, seed: int = 0) -> tuple[bool, list]:
    """Plays the record with ALFWorld's handcoded expert; returns ``(won, commands)``."""
    _require_alfworld()
    import textworld
    from alfworld.agents.environment.alfred_tw_env import (AlfredDemangler, AlfredExpert,
                                                           AlfredExpertType)
    state = random.getstate()
    random.seed(seed)  # the expert breaks ties with the global RNG
    try:
        with tempfile.TemporaryDirectory(prefix="hj_alfworld_") as d:
            path = write_game(record, d)
            infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True,
                                       extras=["expert_plan"])
            with _quiet():
                env = textworld.start(path, infos, wrappers=[
                    AlfredDemangler(shuffle=False), AlfredExpert(AlfredExpertType.HANDCODED)])
                gs = env.reset()
            commands: list = []
            try:
                for _ in range(max_steps):
                    if gs["won"]:
                        break
                    cmd = gs["extra.expert_plan"][0]
                    commands.append(cmd)
                    with _quiet():
                        gs, _, done = env.step(cmd)
                    if done and not gs["won"]:
                        break
                return bool(gs["won"]), commands
            finally:
                env.close()
    except Exception:  # noqa: BLE001 - the expert raises on problems it cannot solve
        return False, []
    finally:
        random.setstate(state)


_NO_OP_PREFIXES = ("look", "inventory", "help", "examine")


def demonstration(commands: Sequence[str]) -> list:
    """The expert's commands without the ones that cannot change the PDDL state (``look``,
    ``inventory``, ``help``, ``examine``: their only effect is the ``checked`` bookkeeping
    predicate, which no ALFWorld goal mentions), so demonstrations are not padded with the
    expert's exploration fallbacks."""
    return [c for c in commands if not c.startswith(_NO_OP_PREFIXES)]


def generate_game(seed: int, index: int, task_type: Optional[str] = None,
                  max_tries: int = 20, expert_max_steps: int = 35) -> dict:
    """Game ``index`` of stream ``seed``: a record the handcoded expert solves within
    ``expert_max_steps`` commands (35 = AgentBench's episode cap)."""
    rng = random.Random(f"alfworld-gen|{int(seed)}|{int(index)}")
    tt = task_type or rng.choice(TASK_TYPES)
    if tt not in TASK_TYPES:
        raise ValueError(f"task_type={tt!r}: expected one of {TASK_TYPES}")
    for attempt in range(max_tries):
        p = build_problem(tt, rng)
        if p is None:
            continue
        record = {"task_type": tt, "floorplan": p.floorplan, "pddl_params": p.pddl_params,
                  "goal_desc": p.goal_desc, "pddl_problem": p.pddl_problem,
                  "gen": [int(seed), int(index), attempt]}
        won, commands = run_expert(record, max_steps=expert_max_steps, seed=attempt)
        if won:
            record["solvable"] = True
            record["expert_commands"] = commands
            record["walkthrough"] = demonstration(commands)
            return record
    raise RuntimeError(f"no expert-solvable {tt} game after {max_tries} problems "
                       f"(seed={seed}, index={index})")


def generate_games(n: int, seed: int = 0, task_types: Optional[Sequence[str]] = None,
                   start: int = 0) -> list[dict]:
    """``n`` records; ``task_types`` cycles (balanced) when given, else uniform."""
    tts = list(task_types) if task_types else None
    if tts:
        bad = [t for t in tts if t not in TASK_TYPES]
        if bad:
            raise ValueError(f"task_types: unknown {bad}; expected a subset of {TASK_TYPES}")
    return [generate_game(seed, start + i, tts[(start + i) % len(tts)] if tts else None)
            for i in range(n)]
