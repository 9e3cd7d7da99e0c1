"""Flag parsing shared by the launchers."""
import json

from absl import app


def json_flag(name, value):
    """The JSON value of flag ``--name`` (None when unset); a usage error naming the flag otherwise."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise app.UsageError(f"--{name}={value!r}: not JSON ({e})")
