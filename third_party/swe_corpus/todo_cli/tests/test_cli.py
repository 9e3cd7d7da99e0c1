import io

from todo_cli.cli import format_task, main
from todo_cli.store import Task


def run(tmp_path, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(["--file", str(tmp_path / "todo.json"), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_add_and_list(tmp_path):
    assert run(tmp_path, "add", "buy", "milk", "-t", "home")[1] == "added task 1\n"
    run(tmp_path, "add", "fix", "bug", "-p", "high", "--due", "2024-06-01")
    code, out, _ = run(tmp_path, "list")
    assert code == 0
    assert out.splitlines() == ["[ ]   2 ! fix bug (due 2024-06-01)",
                                "[ ]   1   buy milk #home"]


def test_list_empty(tmp_path):
    assert run(tmp_path, "list")[1] == "no tasks\n"


def test_done_and_list_all(tmp_path):
    run(tmp_path, "add", "a")
    run(tmp_path, "add", "b")
    assert run(tmp_path, "done", "1", "2")[1] == "completed 2 task(s)\n"
    assert run(tmp_path, "list")[1] == "no tasks\n"
    assert len(run(tmp_path, "list", "--all")[1].splitlines()) == 2


def test_done_unknown_id_is_an_error(tmp_path):
    code, out, err = run(tmp_path, "done", "9")
    assert code == 1
    assert "no task with id 9" in err


def test_rm_and_purge(tmp_path):
    run(tmp_path, "add", "a")
    run(tmp_path, "add", "b")
    run(tmp_path, "add", "c")
    assert run(tmp_path, "rm", "2")[1] == "removed task 2: b\n"
    run(tmp_path, "done", "1")
    assert run(tmp_path, "purge")[1] == "purged 1 task(s)\n"
    assert run(tmp_path, "stats")[1] == "1 open, 0 done, 1 total\n"


def test_filters(tmp_path):
    run(tmp_path, "add", "w1", "-t", "work")
    run(tmp_path, "add", "h1", "-t", "home", "-p", "low")
    assert run(tmp_path, "list", "-t", "work")[1].count("\n") == 1
    assert "h1" in run(tmp_path, "list", "-p", "low")[1]


def test_bad_date_rejected(tmp_path):
    code, _, _ = run(tmp_path, "add", "x", "--due", "2024-13-01")
    assert code == 2
    code, _, _ = run(tmp_path, "add", "x", "--due", "tomorrow")
    assert code == 2


def test_missing_command(tmp_path):
    assert run(tmp_path)[0] == 2


def test_format_task_done_low():
    t = Task(12, "read", priority="low", tags=["b", "a"], done=True)
    assert format_task(t) == "[x]  12 . read #a #b"
