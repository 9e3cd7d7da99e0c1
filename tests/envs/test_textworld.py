"""TextWorld games made with tw-make: the walkthrough wins through both protocols, the banner
is stripped, recipes and splits are deterministic; plus the shared text-game helpers."""
import pytest

from harness_jax.envs import ToolCall, registry
from harness_jax.envs import textgame
from harness_jax.envs import textworld_env as tw


def test_snap_and_parse_helpers():
    adm = ["go to countertop 1", "go to cabinet 2", "take apple 1 from countertop 1", "look"]
    assert textgame.snap_to_admissible("Go to  Cabinet 2.", adm) == ("go to cabinet 2", True)
    assert textgame.snap_to_admissible("take the apple from countertop 1", adm) == (
        "take apple 1 from countertop 1", False)
    assert textgame.snap_to_admissible("anything", []) == (None, False)
    assert textgame.parse_action_text("THOUGHT: hm\nACTION: look\nmore") == "look"
    assert textgame.parse_action_text("action:  `open fridge 1`") == "open fridge 1"
    assert textgame.parse_action_text("no action here") is None
    b = textgame.sentence_bleu
    assert b("a b c d".split(), "a b c d".split()) == pytest.approx(1.0)
    assert b("a b".split(), "a b c d".split()) < b("a b c".split(), "a b c d".split())


def test_recipes_and_splits_are_deterministic():
    t = tw.make_task("tw-coin_collector", {"level": 3}, seed=5)
    assert t.task_id == tw.make_task("tw-coin_collector", {"level": 3}, seed=5).task_id
    cmd = tw.tw_make_command({"challenge": "tw-cooking",
                              "args": {"recipe": 2, "cook": True, "cut": False}, "seed": 3},
                             "/tmp/g.z8")
    assert cmd[-9:] == ["--cook", "--recipe", "2", "--seed", "3", "--output", "/tmp/g.z8", "-f",
                        "--silent"] and "--cut" not in cmd
    train = registry.load_split("textworld", "train", n=4)
    search = registry.load_split("textworld", "search", n=4)
    assert [x.task_id for x in train] == [x.task_id for x in registry.load_split(
        "textworld", "train", n=4)]
    assert not {x.task_id for x in train} & {x.task_id for x in search}
    with pytest.raises(ValueError, match="challenge="):
        tw.make_task("zork", {})
    with pytest.raises(ValueError, match="bad option name"):
        tw.make_task("custom", {"--seed; rm": 1})


@pytest.fixture(scope="module")
def tw_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tw_games"))


@pytest.mark.slow
@pytest.mark.parametrize("challenge,args,proto", [
    ("tw-coin_collector", {"level": 1}, "text"),
    ("custom", {"world-size": 2, "nb-objects": 3, "quest-length": 2}, "function"),
])
def test_walkthrough_wins_a_tw_make_game(tw_cache, challenge, args, proto):
    env = tw.TextWorldEnv(protocol=proto, cache_dir=tw_cache)
    task = tw.make_task(challenge, args, seed=3)
    obs = env.reset(task)
    assert "$$" not in obs and "AVAILABLE ACTIONS:" in obs
    assert env.walkthrough
    res = None
    for cmd in env.walkthrough:
        res = env.step(ToolCall("take_action", {"action": cmd}) if proto == "function"
                       else f"ACTION: {cmd}")
        if res.done:
            break
    assert res.done and res.reward == 1.0 and res.info["game_score"] == res.info["max_score"]
    ev = env.evaluate()
    assert ev["success"] and ev["category"] == challenge
    # a second reset reuses the compiled game; an unknown command is snapped, not rejected
    env.reset(task)
    admissible = env.admissible_commands
    r = env.step("ACTION: take the shiny thing" if proto == "text"
                 else ToolCall("take_action", {"action": "take the shiny thing"}))
    assert r.info["snapped"] and r.info["command"] in admissible
    env.close()


def test_protocol_conformance(tw_cache, check_conformance):
    task = tw.make_task("tw-coin_collector", {"level": 1}, seed=3)
    env = tw.TextWorldEnv(cache_dir=tw_cache)
    env.reset(task)
    actions = ["ACTION: " + c for c in env.walkthrough]
    env.close()
    check_conformance(lambda: tw.TextWorldEnv(cache_dir=tw_cache), task, actions)
