"""Tasks and their JSON file store."""
import json
import os

PRIORITIES = ("low", "normal", "high")


class StoreError(Exception):
    pass


class Task:
    def __init__(self, task_id, title, priority="normal", tags=(), due=None, done=False):
        if priority not in PRIORITIES:
            raise StoreError(f"unknown priority {priority!r}; use one of {', '.join(PRIORITIES)}")
        if not title.strip():
            raise StoreError("a task needs a title")
        self.id = task_id
        self.title = title.strip()
        self.priority = priority
        self.tags = sorted(set(tags))
        self.due = due
        self.done = done

    def to_dict(self):
        return {"id": self.id, "title": self.title, "priority": self.priority,
                "tags": list(self.tags), "due": self.due, "done": self.done}

    @classmethod
    def from_dict(cls, d):
        return cls(d["id"], d["title"], d.get("priority", "normal"), d.get("tags", ()),
                   d.get("due"), d.get("done", False))

    def rank(self):
        """Sort key: open before done, high priority first, earliest due first, then id."""
        due = self.due or "9999-99-99"
        return (self.done, -PRIORITIES.index(self.priority), due, self.id)


class Store:
    def __init__(self, path):
        self.path = path
        self.tasks = []
        self.next_id = 1
        if os.path.exists(path):
            self.load()

    def load(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise StoreError(f"{self.path} is not valid JSON: {e}") from e
        self.tasks = [Task.from_dict(d) for d in data.get("tasks", [])]
        self.next_id = data.get("next_id", max((t.id for t in self.tasks), default=0) + 1)

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"next_id": self.next_id, "tasks": [t.to_dict() for t in self.tasks]},
                      f, indent=2)
        os.replace(tmp, self.path)

    def add(self, title, priority="normal", tags=(), due=None):
        task = Task(self.next_id, title, priority, tags, due)
        self.tasks.append(task)
        self.next_id += 1
        return task

    def get(self, task_id):
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise StoreError(f"no task with id {task_id}")

    def complete(self, task_id):
        task = self.get(task_id)
        if task.done:
            raise StoreError(f"task {task_id} is already done")
        task.done = True
        return task

    def remove(self, task_id):
        task = self.get(task_id)
        self.tasks.remove(task)
        return task

    def query(self, tag=None, include_done=False, priority=None, due_before=None):
        out = []
        for t in self.tasks:
            if t.done and not include_done:
                continue
            if tag is not None and tag not in t.tags:
                continue
            if priority is not None and t.priority != priority:
                continue
            if due_before is not None and (t.due is None or t.due >= due_before):
                continue
            out.append(t)
        return sorted(out, key=Task.rank)

    def purge_done(self):
        before = len(self.tasks)
        self.tasks = [t for t in self.tasks if not t.done]
        return before - len(self.tasks)

    def stats(self):
        done = sum(1 for t in self.tasks if t.done)
        return {"total": len(self.tasks), "done": done, "open": len(self.tasks) - done}
