"""The ``todo`` command: add, list, done, rm, purge, stats."""
import argparse
import re
import sys

from todo_cli.store import PRIORITIES, Store, StoreError

DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def valid_date(text):
    if not DATE_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a YYYY-MM-DD date")
    month, day = int(text[5:7]), int(text[8:10])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid date")
    return text


def build_parser():
    p = argparse.ArgumentParser(prog="todo", description="A small to-do list.")
    p.add_argument("--file", default="todo.json", help="store location")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add", help="add a task")
    a.add_argument("title", nargs="+")
    a.add_argument("-p", "--priority", choices=PRIORITIES, default="normal")
    a.add_argument("-t", "--tag", action="append", default=[])
    a.add_argument("--due", type=valid_date)
    ls = sub.add_parser("list", help="list tasks")
    ls.add_argument("-t", "--tag")
    ls.add_argument("-a", "--all", action="store_true", help="include done tasks")
    ls.add_argument("-p", "--priority", choices=PRIORITIES)
    ls.add_argument("--before", type=valid_date)
    d = sub.add_parser("done", help="mark tasks done")
    d.add_argument("ids", nargs="+", type=int)
    r = sub.add_parser("rm", help="remove a task")
    r.add_argument("id", type=int)
    sub.add_parser("purge", help="remove all done tasks")
    sub.add_parser("stats", help="counts")
    return p


def format_task(task):
    mark = "x" if task.done else " "
    flag = {"high": "!", "normal": " ", "low": "."}[task.priority]
    line = f"[{mark}] {task.id:>3} {flag} {task.title}"
    if task.due:
        line += f" (due {task.due})"
    if task.tags:
        line += " " + " ".join("#" + t for t in task.tags)
    return line


def run(args, out):
    store = Store(args.file)
    if args.command == "add":
        task = store.add(" ".join(args.title), args.priority, args.tag, args.due)
        store.save()
        print(f"added task {task.id}", file=out)
    elif args.command == "list":
        tasks = store.query(args.tag, args.all, args.priority, args.before)
        if not tasks:
            print("no tasks", file=out)
        for t in tasks:
            print(format_task(t), file=out)
    elif args.command == "done":
        for task_id in args.ids:
            store.complete(task_id)
        store.save()
        print(f"completed {len(args.ids)} task(s)", file=out)
    elif args.command == "rm":
        task = store.remove(args.id)
        store.save()
        print(f"removed task {task.id}: {task.title}", file=out)
    elif args.command == "purge":
        n = store.purge_done()
        store.save()
        print(f"purged {n} task(s)", file=out)
    elif args.command == "stats":
        s = store.stats()
        print(f"{s['open']} open, {s['done']} done, {s['total']} total", file=out)
    return 0


def main(argv=None, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return run(args, out)
    except StoreError as e:
        print(f"todo: error: {e}", file=err)
        return 1


if __name__ == "__main__":
    sys.exit(main())
