"""SQL engines behind DBBench: SQLite in-process and MariaDB/MySQL over a Unix socket.

Both engines implement the same two calls:

* ``engine.open_session(tables) -> Session``: an isolated database holding the item's tables,
  created the AgentBench way (every column ``TEXT``; values inserted as strings, ``None`` as
  NULL). SQLite gives each session its own in-memory database; MariaDB gives each session its
  own database and its own user with privileges on that database only.
* ``session.execute(sql) -> ExecResult``: runs ONE statement and renders the result as
  AgentBench does (``str`` of the fetched rows, a Python list of tuples, cut at 800 characters
  + ``"[TRUNCATED]"``; the error text on failure). Results are rendered while they stream, so a
  huge result never materialises in memory; runaway statements are stopped after
  ``statement_timeout_s``.
* ``session.table_hash(table_names)``: AgentBench's md5 fingerprint of the final table(s),
  ``md5(group_concat(rowhash order by rowhash))`` with ``rowhash = substring(md5(concat_ws(',',
  cols...)), 1, 5)``, as the string of the fetched result (e.g. ``"[('fa81...',)]"``); several
  tables are joined with ``"_"`` in sorted order (AgentBench FC).

Safety. SQLite: an authorizer refuses ATTACH/DETACH, writable pragmas, virtual tables and
extension loading, and ``setlimit`` caps string and SQL lengths. MariaDB: the per-episode user
has no global privileges (no FILE, so no ``LOAD DATA INFILE`` / ``INTO OUTFILE``), cannot see
other databases, and an admin-side watchdog kills statements that outlive the timeout.
"""
from __future__ import annotations

import abc
import dataclasses
import hashlib
import os
import re
import secrets
import sqlite3
import threading
import time
from typing import Any, Iterable, Optional, Sequence

MAX_OUTPUT_CHARS = 800
TRUNCATED_MARK = "[TRUNCATED]"


class EngineUnavailable(RuntimeError):
    """The engine cannot be reached (server down, driver missing): an infrastructure error."""


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """One table of a DBBench item: name, column names (all created as TEXT), rows.

    Only the shape is checked here (what is needed to attempt the set-up at all). Whether a
    SQL engine can *materialise* the table (empty or duplicate column names, rows whose length
    differs from the header: all present in AgentBench's own data) is ``setup_problems``'s
    question; such tables are set up as far as MySQL would get (see ``Session.setup_errors``).
    """
    name: str
    columns: tuple
    rows: tuple

    @classmethod
    def from_item(cls, table: dict, where: str = "table") -> "TableSpec":
        if not isinstance(table, dict):
            raise ValueError(f"{where}: expected a dict with table_name and table_info, got "
                             f"{type(table).__name__}")
        name = table.get("table_name")
        info = table.get("table_info")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.table_name: missing or not a non-empty string")
        if not isinstance(info, dict):
            raise ValueError(f"{where}.table_info: missing; expected {{columns: [{{name, type}}], "
                             "rows: [[...]]}")
        cols = info.get("columns")
        rows = info.get("rows")
        if not isinstance(cols, list) or not cols:
            raise ValueError(f"{where}.table_info.columns: expected a non-empty list of "
                             "{name, type} objects")
        names = []
        for i, c in enumerate(cols):
            n = c.get("name") if isinstance(c, dict) else c
            if not isinstance(n, str):
                raise ValueError(f"{where}.table_info.columns[{i}]: expected {{'name': str, "
                                 f"'type': str}}, got {c!r}")
            names.append(n)
        if not isinstance(rows, list) or not all(isinstance(r, (list, tuple)) for r in rows):
            raise ValueError(f"{where}.table_info.rows: expected a list of rows (lists)")
        out_rows = tuple(tuple(None if v is None else str(v) for v in r) for r in rows)
        return cls(name=name, columns=tuple(names), rows=out_rows)


MYSQL_IDENT_MAX = 64


def setup_problems(table: TableSpec) -> tuple[Optional[str], Optional[str]]:
    """What MySQL says when AgentBench's set-up of ``table`` fails: ``(create_error,
    insert_error)``, each None when that statement succeeds. A failed ``CREATE TABLE`` leaves no
    table (and no ``INSERT`` is attempted); a failed ``INSERT`` leaves the table empty.

    The rules are MySQL's (the engine AgentBench runs): a column name must be non-empty, must
    not end with a space and has at most 64 characters; column names are unique ignoring case;
    every row has one value per column. SQLite would accept some of these, so both engines
    apply them before touching the database, and every engine gives the same database.
    """
    seen: set = set()
    for i, c in enumerate(table.columns):
        if c == "" or c.endswith(" "):
            return f"1166 (42000): Incorrect column name '{c}'", None
        if len(c) > MYSQL_IDENT_MAX:
            return f"1059 (42000): Identifier name '{c}' is too long", None
        if c.lower() in seen:
            return f"1060 (42S21): Duplicate column name '{c}'", None
        seen.add(c.lower())
    if len(table.name) > MYSQL_IDENT_MAX:
        return f"1059 (42000): Identifier name '{table.name}' is too long", None
    for i, r in enumerate(table.rows):
        if len(r) != len(table.columns):
            return None, f"1136 (21S01): Column count doesn't match value count at row {i + 1}"
    return None, None


@dataclasses.dataclass
class ExecResult:
    text: str                    # what the agent sees
    error: Optional[str] = None  # the engine's error message, when the statement failed
    truncated: bool = False
    timed_out: bool = False
    infra_error: bool = False    # the engine itself failed (connection lost, server down)


def render_rows(rows: Iterable[tuple], limit: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    """``str(list(rows))`` cut at ``limit`` characters + ``[TRUNCATED]``, consuming the rows
    lazily and stopping as soon as the limit is passed (a huge result is never held)."""
    parts = ["["]
    size = 1
    first = True
    for row in rows:
        piece = ("" if first else ", ") + repr(tuple(row))
        first = False
        parts.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(parts)[:limit] + TRUNCATED_MARK, True
    parts.append("]")
    text = "".join(parts)
    if len(text) > limit:
        return text[:limit] + TRUNCATED_MARK, True
    return text, False


def _quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def hash_from_row_strings(row_strings: Iterable[str]) -> str:
    """AgentBench's fingerprint computed from each row's ``concat_ws(',', cols...)``."""
    rowhashes = sorted(_md5(s)[:5] for s in row_strings)
    if not rowhashes:
        return str([(None,)])
    return str([(_md5(",".join(rowhashes)),)])


def join_table_hashes(hashes: Sequence[str]) -> str:
    return hashes[0] if len(hashes) == 1 else "_".join(sorted(hashes))


class Session(abc.ABC):
    """One isolated database. ``setup_errors`` lists the set-up statements that failed (as
    ``"CREATE TABLE `t`: <MySQL error>"``); the session is usable whatever they say, holding
    what AgentBench's set-up would have left (see ``setup_problems``)."""

    setup_errors: list

    def _setup(self, tables: Sequence[TableSpec], create, insert, errors: tuple) -> None:
        """Creates each table (``create(table)``) and fills it (``insert(table)``) as far as
        MySQL would; statement errors (``errors``: the driver's exception types) are recorded
        in ``setup_errors``, anything else propagates (infrastructure)."""
        self.setup_errors = []
        for t in tables:
            create_err, insert_err = setup_problems(t)
            if create_err is None:
                try:
                    create(t)
                except errors as e:
                    create_err = f"{type(e).__name__}: {e}"
            if create_err is None and insert_err is None and t.rows:
                try:
                    insert(t)
                except errors as e:
                    insert_err = f"{type(e).__name__}: {e}"
            for stmt, err in (("CREATE TABLE", create_err), ("INSERT INTO", insert_err)):
                if err is not None:
                    self.setup_errors.append(f"{stmt} {_quote_ident(t.name)}: {err}")

    @abc.abstractmethod
    def execute(self, sql: str) -> ExecResult:
        ...

    @abc.abstractmethod
    def table_hash(self, table_names: Sequence[str]) -> str:
        ...

    @abc.abstractmethod
    def fetch_all(self, sql: str) -> list:
        """Runs a statement and returns all its rows (trusted callers: generator, tests)."""

    @abc.abstractmethod
    def close(self) -> None:
        ...


class Engine(abc.ABC):
    name: str = "engine"

    @abc.abstractmethod
    def open_session(self, tables: Sequence[TableSpec]) -> Session:
        ...

    def close(self) -> None:
        return None


# ---------------------------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------------------------
def _concat_ws(sep, *args):
    if sep is None:
        return None
    return str(sep).join(_sql_str(a) for a in args if a is not None)


def _concat(*args):
    if any(a is None for a in args):
        return None
    return "".join(_sql_str(a) for a in args)


def _sql_str(v) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _md5_udf(v):
    return None if v is None else hashlib.md5(
        v if isinstance(v, bytes) else _sql_str(v).encode("utf-8")).hexdigest()


def _left(s, n):
    return None if s is None or n is None else _sql_str(s)[:max(int(n), 0)]


def _right(s, n):
    if s is None or n is None:
        return None
    n = max(int(n), 0)
    return _sql_str(s)[-n:] if n else ""


def _locate(sub, s, pos=1):
    if sub is None or s is None:
        return None
    return _sql_str(s).lower().find(_sql_str(sub).lower(), max(int(pos), 1) - 1) + 1


def _regexp(pattern, value):
    if pattern is None or value is None:
        return None
    try:
        return 1 if re.search(_sql_str(pattern), _sql_str(value), re.IGNORECASE) else 0
    except re.error:
        return 0


_ALLOWED_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info"}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_SHOW_TABLES = re.compile(r"^\s*show\s+(full\s+)?tables\s*;?\s*$", re.I)
_SHOW_DATABASES = re.compile(r"^\s*show\s+(databases|schemas)\s*;?\s*$", re.I)
_DESCRIBE = re.compile(
    r"^\s*(?:desc|describe|show\s+(?:full\s+)?(?:columns|fields)\s+(?:from|in))\s+"
    r"(`[^`]+`|\"[^\"]+\"|[\w$]+)\s*;?\s*$", re.I)
_SHOW_CREATE = re.compile(r"^\s*show\s+create\s+table\s+(`[^`]+`|\"[^\"]+\"|[\w$]+)\s*;?\s*$",
                          re.I)


def _authorizer(action, arg1, arg2, dbname, source):
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA:
        # read-only schema pragmas only; anything with an argument that sets a value is refused
        if (arg1 or "").lower() in _ALLOWED_PRAGMAS:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    if action in (sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class SQLiteSession(Session):
    def __init__(self, tables: Sequence[TableSpec], statement_timeout_s: float,
                 max_value_bytes: int):
        self.tables = list(tables)
        self.timeout_s = statement_timeout_s
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.create_function("md5", 1, _md5_udf, deterministic=True)
        conn.create_function("concat_ws", -1, _concat_ws, deterministic=True)
        conn.create_function("concat", -1, _concat, deterministic=True)
        conn.create_function("left", 2, _left, deterministic=True)
        conn.create_function("right", 2, _right, deterministic=True)
        conn.create_function("locate", 2, _locate, deterministic=True)
        conn.create_function("locate", 3, _locate, deterministic=True)
        conn.create_function("lcase", 1, lambda s: None if s is None else _sql_str(s).lower())
        conn.create_function("ucase", 1, lambda s: None if s is None else _sql_str(s).upper())
        conn.create_function("regexp", 2, _regexp, deterministic=True)

        def create(t: TableSpec) -> None:
            col_sql = ", ".join(f"{_quote_ident(c)} TEXT COLLATE NOCASE" for c in t.columns)
            conn.execute(f"CREATE TABLE IF NOT EXISTS {_quote_ident(t.name)} ({col_sql})")

        def insert(t: TableSpec) -> None:
            marks = ", ".join("?" for _ in t.columns)
            conn.executemany(
                f"INSERT INTO {_quote_ident(t.name)} ({', '.join(map(_quote_ident, t.columns))}) "
                f"VALUES ({marks})", t.rows)

        self._setup(self.tables, create, insert, (sqlite3.Error,))
        # Limits and the authorizer go on after set-up: they guard the agent's statements only.
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1_000_000)
        conn.set_authorizer(_authorizer)
        self._deadline = float("inf")
        conn.set_progress_handler(self._progress, 20_000)
        self.conn = conn

    def _progress(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def _mysql_dialect(self, sql: str) -> Optional[list]:
        """Answers the MySQL introspection statements SQLite lacks (SHOW TABLES, DESCRIBE,
        SHOW CREATE TABLE), in MySQL's result layout."""
        if _SHOW_TABLES.match(sql):
            rows = self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name").fetchall()
            return [tuple(r) for r in rows]
        if _SHOW_DATABASES.match(sql):
            return [("information_schema",), ("main",)]
        m = _DESCRIBE.match(sql) or _SHOW_CREATE.match(sql)
        if m:
            table = m.group(1).strip("`\"")
            info = self.conn.execute(
                "SELECT name FROM pragma_table_info(?)", (table,)).fetchall()
            if not info:
                raise sqlite3.OperationalError(f"Table 'main.{table}' doesn't exist")
            if _SHOW_CREATE.match(sql):
                cols = ",\n  ".join(f"`{c[0]}` text DEFAULT NULL" for c in info)
                return [(table, f"CREATE TABLE `{table}` (\n  {cols}\n)")]
            return [(c[0], "text", "YES", "", None, "") for c in info]
        return None

    def execute(self, sql: str) -> ExecResult:
        self._deadline = time.monotonic() + self.timeout_s
        try:
            special = self._mysql_dialect(sql)
            if special is not None:
                text, trunc = render_rows(special)
                return ExecResult(text=text, truncated=trunc)
            cur = self.conn.execute(sql)
            if cur.description is None:
                return ExecResult(text="[]")
            text, trunc = render_rows(cur)
            cur.close()
            return ExecResult(text=text, truncated=trunc)
        except sqlite3.OperationalError as e:
            if str(e) == "interrupted":
                msg = (f"Query execution was interrupted (max_statement_time exceeded: "
                       f"{self.timeout_s:g} s)")
                return ExecResult(text=msg, error=msg, timed_out=True)
            return ExecResult(text=str(e), error=str(e))
        except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError) as e:
            return ExecResult(text=str(e), error=str(e))
        finally:
            self._deadline = float("inf")
            if self.conn.in_transaction:
                # a transaction the agent left open is committed, like MySQL autocommit
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.Error:
                    pass

    def fetch_all(self, sql: str) -> list:
        return [tuple(r) for r in self.conn.execute(sql).fetchall()]

    def table_hash(self, table_names: Sequence[str]) -> str:
        hashes = []
        for name in table_names:
            cols = [r[1] for r in self.conn.execute(
                "SELECT cid, name FROM pragma_table_info(?) ORDER BY cid", (name,))]
            if not cols:  # the agent dropped the table: MySQL would raise; no rows to hash
                hashes.append(str([(None,)]))
                continue
            col_sql = ", ".join(_quote_ident(c) for c in cols)
            row_strings = (r[0] for r in self.conn.execute(
                f"SELECT concat_ws(',', {col_sql}) FROM {_quote_ident(name)}"))
            hashes.append(hash_from_row_strings(row_strings))
        return join_table_hashes(hashes)

    def close(self) -> None:
        self.conn.close()


class SQLiteEngine(Engine):
    """One isolated in-memory database per session; MySQL-compatible helper functions
    (md5, concat_ws, concat, left, right, locate, lcase, ucase, REGEXP), NOCASE text columns,
    and SHOW TABLES / DESCRIBE emulation."""
    name = "sqlite"

    def __init__(self, statement_timeout_s: float = 5.0, max_value_bytes: int = 16 << 20):
        if statement_timeout_s <= 0:
            raise ValueError(f"statement_timeout_s={statement_timeout_s} must be > 0")
        self.statement_timeout_s = statement_timeout_s
        self.max_value_bytes = max_value_bytes

    def open_session(self, tables: Sequence[TableSpec]) -> SQLiteSession:
        return SQLiteSession(tables, self.statement_timeout_s, self.max_value_bytes)


# ---------------------------------------------------------------------------------------------
# MariaDB / MySQL
# ---------------------------------------------------------------------------------------------
def default_socket() -> str:
    d = os.environ.get("HARNESS_JAX_MARIADB_DIR", "/tmp/harness_jax_mariadb")
    return os.environ.get("HARNESS_JAX_MARIADB_SOCKET", os.path.join(d, "mysqld.sock"))


def _pymysql():
    try:
        import pymysql  # noqa: WPS433 (optional at import time of the package)
        return pymysql
    except ImportError as e:  # pragma: no cover - pymysql is in INSTALL_REQUIRES
        raise EngineUnavailable("engine='mariadb' needs the PyMySQL driver: pip install pymysql"
                                ) from e


_CONN_LOST = {2006, 2013, 2003, 2002, 2055}


class MariaDBSession(Session):
    def __init__(self, engine: "MariaDBEngine", tables: Sequence[TableSpec]):
        pymysql = _pymysql()
        self.engine = engine
        self.tables = list(tables)
        tag = secrets.token_hex(6)
        self.db = f"hj_{tag}"
        self.user = f"hj_{tag}"
        password = secrets.token_hex(12)
        engine.admin_execute([
            f"CREATE DATABASE {_quote_ident(self.db)} CHARACTER SET utf8mb4 "
            f"COLLATE utf8mb4_general_ci",
            f"CREATE USER '{self.user}'@'localhost' IDENTIFIED BY '{password}' "
            f"WITH MAX_USER_CONNECTIONS 4",
            f"GRANT ALL PRIVILEGES ON {_quote_ident(self.db)}.* TO '{self.user}'@'localhost'",
        ])
        self._closed = False
        try:
            self.conn = pymysql.connect(
                unix_socket=engine.socket, user=self.user, password=password, database=self.db,
                charset="utf8mb4", autocommit=True, connect_timeout=engine.connect_timeout_s,
                cursorclass=pymysql.cursors.SSCursor, ssl_disabled=True)  # local socket: no TLS
            self.thread_id = self.conn.thread_id()
            with self.conn.cursor() as cur:
                cur.execute(f"SET SESSION max_statement_time = {float(engine.statement_timeout_s)}")

                def create(t: TableSpec) -> None:
                    col_sql = ", ".join(f"{_quote_ident(c)} TEXT" for c in t.columns)
                    cur.execute(f"CREATE TABLE IF NOT EXISTS {_quote_ident(t.name)} ({col_sql})")

                def insert(t: TableSpec) -> None:
                    marks = ", ".join(["%s"] * len(t.columns))
                    # identifiers may hold '%' (e.g. "Turnout (%)"): escape for pyformat
                    target = (f"{_quote_ident(t.name)} "
                              f"({', '.join(map(_quote_ident, t.columns))})").replace("%", "%%")
                    cur.executemany(f"INSERT INTO {target} VALUES ({marks})", list(t.rows))

                # statement errors only; a lost connection (OperationalError) is infrastructure
                self._setup(self.tables, create, insert,
                            (pymysql.err.ProgrammingError, pymysql.err.DataError,
                             pymysql.err.IntegrityError, pymysql.err.InternalError))
        except Exception:
            self.close()
            raise

    def _watchdog(self) -> threading.Timer:
        # the session variable stops SELECTs; the watchdog also stops anything else, and
        # statements after the agent changed its own max_statement_time
        timer = threading.Timer(self.engine.statement_timeout_s + 1.0, self._kill_query)
        timer.daemon = True
        timer.start()
        return timer

    def _kill_query(self):
        try:
            self.engine.admin_execute([f"KILL QUERY {int(self.thread_id)}"])
            self._killed = True
        except Exception:  # noqa: BLE001 - best effort; the statement may have just ended
            pass

    def execute(self, sql: str) -> ExecResult:
        pymysql = _pymysql()
        self._killed = False
        timer = self._watchdog()
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                if cur.description is None:
                    return ExecResult(text="[]")
                text, trunc = render_rows(iter(cur.fetchone, None))
                return ExecResult(text=text, truncated=trunc)
        except pymysql.err.Error as e:
            code = e.args[0] if e.args and isinstance(e.args[0], int) else None
            msg = f"{code} ({getattr(e, 'sqlstate', '') or ''}): {e.args[1]}" if (
                code is not None and len(e.args) > 1) else str(e)
            if code in (1969, 3024) or self._killed or code == 1317:
                return ExecResult(text=msg, error=msg, timed_out=True)
            if code in _CONN_LOST or isinstance(e, pymysql.err.InterfaceError):
                return ExecResult(text=msg, error=msg, infra_error=True)
            return ExecResult(text=msg, error=msg)
        finally:
            timer.cancel()

    def fetch_all(self, sql: str) -> list:
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []

    def table_hash(self, table_names: Sequence[str]) -> str:
        hashes = []
        for name in table_names:
            cols = [r[0] for r in self.fetch_all(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                f"DATABASE() AND TABLE_NAME = '{name.replace(chr(39), chr(39) * 2)}' "
                "ORDER BY ORDINAL_POSITION")]
            if not cols:
                hashes.append(str([(None,)]))
                continue
            col_sql = ", ".join(_quote_ident(c) for c in cols)
            rows = self.fetch_all(
                "select md5(group_concat(rowhash order by rowhash)) as hash from( SELECT "
                f"substring(MD5(CONCAT_WS(',', {col_sql})), 1, 5) AS rowhash FROM "
                f"{_quote_ident(name)}) as sub")
            hashes.append(str(rows))
        return join_table_hashes(hashes)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
        try:
            self.engine.admin_execute([f"DROP DATABASE IF EXISTS {_quote_ident(self.db)}",
                                       f"DROP USER IF EXISTS '{self.user}'@'localhost'"])
        except Exception:  # noqa: BLE001 - the server may be gone; nothing left to clean
            pass


class MariaDBEngine(Engine):
    """MariaDB/MySQL through a Unix socket (``scripts/mariadb.sh start`` runs one).

    ``socket`` defaults to ``$HARNESS_JAX_MARIADB_SOCKET`` (or the script's default); the admin
    account (``root`` with no password on the private server) creates and drops one database and
    one user per session.
    """
    name = "mariadb"

    def __init__(self, socket: Optional[str] = None, admin_user: str = "root",
                 admin_password: str = "", statement_timeout_s: float = 5.0,
                 connect_timeout_s: float = 5.0):
        if statement_timeout_s <= 0:
            raise ValueError(f"statement_timeout_s={statement_timeout_s} must be > 0")
        self.socket = socket or default_socket()
        self.admin_user = admin_user
        self.admin_password = admin_password
        self.statement_timeout_s = statement_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._admin = None
        self._lock = threading.Lock()

    def _admin_conn(self):
        pymysql = _pymysql()
        if self._admin is None:
            if not os.path.exists(self.socket):
                raise EngineUnavailable(
                    f"MariaDB socket {self.socket} does not exist: start the server with "
                    "`bash scripts/mariadb.sh start` or set HARNESS_JAX_MARIADB_SOCKET")
            try:
                self._admin = pymysql.connect(
                    unix_socket=self.socket, user=self.admin_user, password=self.admin_password,
                    autocommit=True, connect_timeout=self.connect_timeout_s, charset="utf8mb4",
                    ssl_disabled=True)
            except pymysql.err.Error as e:
                raise EngineUnavailable(f"cannot connect to MariaDB at {self.socket}: {e}") from e
        return self._admin

    def admin_execute(self, statements: Sequence[str]) -> None:
        pymysql = _pymysql()
        with self._lock:
            for attempt in range(2):
                conn = self._admin_conn()
                try:
                    with conn.cursor() as cur:
                        for s in statements:
                            cur.execute(s)
                    return
                except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as e:
                    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
                    if code in _CONN_LOST or isinstance(e, pymysql.err.InterfaceError):
                        self._admin = None  # reconnect once
                        if attempt == 0:
                            continue
                        raise EngineUnavailable(f"MariaDB admin connection lost: {e}") from e
                    raise

    def ping(self) -> bool:
        try:
            self.admin_execute(["SELECT 1"])
            return True
        except Exception:  # noqa: BLE001
            return False

    def open_session(self, tables: Sequence[TableSpec]) -> MariaDBSession:
        pymysql = _pymysql()
        try:
            return MariaDBSession(self, tables)
        except pymysql.err.OperationalError as e:
            code = e.args[0] if e.args and isinstance(e.args[0], int) else None
            if code in _CONN_LOST:
                raise EngineUnavailable(f"MariaDB unreachable at {self.socket}: {e}") from e
            raise

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                try:
                    self._admin.close()
                except Exception:  # noqa: BLE001
                    pass
                self._admin = None


def mariadb_available(socket: Optional[str] = None) -> bool:
    """True when a MariaDB server answers on the socket (used by tests and the registry)."""
    try:
        eng = MariaDBEngine(socket=socket, connect_timeout_s=2.0)
        ok = eng.ping()
        eng.close()
        return ok
    except Exception:  # noqa: BLE001
        return False


def make_engine(engine: Any = "sqlite", **kw) -> Engine:
    """``"sqlite"`` | ``"mariadb"`` (alias ``"mysql"``) | an ``Engine`` instance."""
    if isinstance(engine, Engine):
        return engine
    if engine == "sqlite":
        return SQLiteEngine(**kw)
    if engine in ("mariadb", "mysql"):
        return MariaDBEngine(**kw)
    raise ValueError(f"engine={engine!r}: expected 'sqlite' or 'mariadb' (or an Engine instance)")

