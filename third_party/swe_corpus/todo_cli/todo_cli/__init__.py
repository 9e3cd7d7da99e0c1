"""todo_cli: a command-line to-do list with priorities, tags and due dates."""
from todo_cli.cli import main
from todo_cli.store import Store, StoreError, Task

__all__ = ["main", "Store", "StoreError", "Task"]
