"""minijson: a JSON parser and serializer written from the grammar."""
from minijson.decoder import JSONDecodeError, loads
from minijson.encoder import dumps

__all__ = ["JSONDecodeError", "loads", "dumps"]
