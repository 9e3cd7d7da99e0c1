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


def test_wait_healthy_reports_a_dead_server_and_times_out():
    """``wait_healthy`` (used by the launcher and the e2e tests): a server process that exits
    first is an error carrying its output; nothing listening is a timeout."""
    import socket
    import subprocess
    import sys

    from harness_jax.sampling.http_util import wait_healthy
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc = subprocess.Popen([sys.executable, "-c", "print('bad flag --tp'); raise SystemExit(3)"],
                            stdout=subprocess.PIPE, text=True)
    proc.wait()
    with pytest.raises(RuntimeError, match="code 3:\n.*bad flag --tp"):
        wait_healthy(url, 30, proc, poll_s=0.05)
    with pytest.raises(TimeoutError, match="not 200"):
        wait_healthy(url, 0.3, poll_s=0.05)
