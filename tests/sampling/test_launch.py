"""The SGLang launcher's command line (GPU hosts only; the command is built here, never run)."""
import pytest

from launch.sglang_servers import gpu_groups, sglang_command


def test_sglang_command_has_rl_flags():
    cmd = sglang_command("/ckpt", 30001, tp=2, weight_version="5", dummy_weights=True, python="py")
    assert cmd[:3] == ["py", "-m", "sglang.launch_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags["--model-path"] == "/ckpt" and flags["--port"] == "30001" and flags["--tp-size"] == "2"
    assert flags["--sampling-defaults"] == "openai" and flags["--weight-version"] == "5"
    assert "--skip-tokenizer-init" in cmd and cmd[cmd.index("--load-format") + 1] == "dummy"
    chat = sglang_command("/ckpt", 30000, chat=True)
    assert "--skip-tokenizer-init" not in chat and chat[chat.index("--tool-call-parser") + 1] == "qwen3_coder"


def test_gpu_groups():
    assert gpu_groups(["0", "1", "2", "3"], 2) == [["0", "1"], ["2", "3"]]
    with pytest.raises(ValueError, match="multiple of --tp"):
        gpu_groups(["0", "1", "2"], 2)
