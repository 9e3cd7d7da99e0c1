"""Deterministic generator of DBBench-format training tasks.

``generate_items(n, seed)`` returns AgentBench DB items (same fields as ``standard.jsonl``):
WikiSQL-style single tables from eight domains (football players, films, cities, elections,
albums, staff, racing, inventory), 8-30 rows each, and one question per item from every
category AgentBench uses: ``other``, ``counting``, ``comparison``, ``ranking``,
``aggregation-{SUM,MIN,MAX,AVG}`` (SELECT family; ``label`` = gold answers, ``sql.query`` =
gold SQL) and ``INSERT`` / ``UPDATE`` / ``DELETE`` (``label`` = [gold SQL], ``answer_md5`` =
the AgentBench fingerprint of the table after the gold statement).

Labels are computed by executing the gold SQL (SQLite, in-process). The gold SQL is written in
the dialect both engines share (backticked identifiers, ``col + 0`` for numbers, ``''`` quote
escaping) and questions are constrained so that the answer is unique and engine-independent:
extremes and compared values are distinct, sums/averages use integer columns only, averages
are rounded to 2 decimals and never sit on a rounding tie, updates change a value, deletes
remove some but not all rows. Item ``i`` depends only on ``(seed, i)``.

Narrower task families (for tiny policies trained from scratch, e.g. the CPU demo): ``domain``
fixes the domain (by its singular noun, ``DOMAIN_NAMES``) and ``table_name`` the table's name,
so a task differs only in its rows and its question; ``describe_table=False`` leaves out
AgentBench's ``add_description`` sentence ("The name of this table is ..., and the headers of
this table are ...") -- with one fixed table the policy learns the schema, and a harness may
show it. With the defaults the stream is exactly the default one.
"""
from __future__ import annotations

import dataclasses
import random
from fractions import Fraction
from typing import Optional, Sequence

from harness_jax.envs.dbbench.data import CATEGORIES, MUTATION_CATEGORIES
from harness_jax.envs.dbbench.engines import SQLiteEngine, TableSpec

FIRST = ["James", "Maria", "Liam", "Sofia", "Noah", "Emma", "Lucas", "Mia", "Mateo", "Olivia",
         "Hugo", "Chloe", "Ivan", "Anna", "Kenji", "Yuki", "Omar", "Leila", "Pedro", "Ines",
         "Arjun", "Priya", "Tomas", "Eva", "Felix", "Nora", "Diego", "Lina", "Sven", "Aisha"]
LAST = ["Smith", "Garcia", "Muller", "Rossi", "Silva", "Kowalski", "Tanaka", "Haddad", "Novak",
        "Jensen", "O'Neil", "Dubois", "Petrov", "Costa", "Nakamura", "Fischer", "Moreau",
        "Ortega", "Lindqvist", "Bakker", "Santos", "Weber", "Kim", "Popescu", "Horvat"]
ADJ = ["Silent", "Golden", "Broken", "Hidden", "Crimson", "Electric", "Midnight", "Frozen",
       "Wild", "Last", "Distant", "Burning", "Velvet", "Paper", "Iron", "Glass", "Lonely"]
NOUN = ["River", "Empire", "Garden", "Signal", "Harbor", "Mirror", "Forest", "Station",
        "Promise", "Kingdom", "Voyage", "Echo", "Horizon", "Orchard", "Lantern", "Machine"]
PLACE_A = ["North", "South", "East", "West", "New", "Old", "Upper", "Lower", "Port", "Lake"]
PLACE_B = ["haven", "field", "bridge", "ford", "wick", "ton", "burg", "dale", "mouth", "vale",
           "stead", "moor", "cliff", "brook"]


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    kind: str                   # "key" | "cat" | "int" | "dec"
    pool: tuple = ()            # values for "cat"
    lo: float = 0
    hi: float = 0
    maker: str = ""             # key generator: "person" | "title" | "place" | "product"


@dataclasses.dataclass(frozen=True)
class Domain:
    table: tuple                # table-name templates
    singular: str
    plural: str
    columns: tuple


DOMAINS = (
    Domain(("{region} League players {year}", "Squad statistics {year}"), "player", "players", (
        Column("Player", "key", maker="person"),
        Column("Club", "cat", ("Rovers", "United", "Athletic", "City", "Wanderers", "Albion")),
        Column("Position", "cat", ("Goalkeeper", "Defender", "Midfielder", "Forward")),
        Column("Nationality", "cat", ("England", "Spain", "Brazil", "Japan", "Nigeria", "France")),
        Column("Goals", "int", lo=0, hi=40), Column("Appearances", "int", lo=1, hi=50),
        Column("Age", "int", lo=17, hi=38))),
    Domain(("Films released in the {decade}s", "{region} film festival selection"),
           "film", "films", (
        Column("Title", "key", maker="title"),
        Column("Director", "cat", ("A. Varga", "M. Okafor", "L. Chen", "R. Duarte", "S. Berg")),
        Column("Genre", "cat", ("Drama", "Comedy", "Thriller", "Documentary", "Animation")),
        Column("Year", "int", lo=1950, hi=2020), Column("Gross (millions)", "int", lo=1, hi=900),
        Column("Rating", "dec", lo=1.0, hi=9.9))),
    Domain(("Largest towns of {region}", "Municipalities of {region} province"),
           "town", "towns", (
        Column("Town", "key", maker="place"),
        Column("District", "cat", ("Coastal", "Central", "Highland", "Riverside", "Border")),
        Column("Population", "int", lo=2000, hi=900000), Column("Area (km2)", "int", lo=5, hi=900),
        Column("Founded", "int", lo=900, hi=1990))),
    Domain(("{region} general election {year}", "Results of the {year} {region} election"),
           "district", "districts", (
        Column("District", "key", maker="place"),
        Column("Winner", "cat", tuple(f"{f} {l}" for f, l in zip(FIRST[:6], LAST[:6]))),
        Column("Party", "cat", ("Labour", "Liberal", "Green", "Conservative", "Independent")),
        Column("Votes", "int", lo=1000, hi=60000), Column("Turnout (%)", "dec", lo=40, hi=90))),
    Domain(("Discography of {person}", "Albums chart {year}"), "album", "albums", (
        Column("Album", "key", maker="title"),
        Column("Label", "cat", ("Parlophone", "Sub Pop", "Warp", "Domino", "Island")),
        Column("Format", "cat", ("LP", "EP", "Live", "Compilation")),
        Column("Year", "int", lo=1965, hi=2023), Column("Peak position", "int", lo=1, hi=100),
        Column("Copies sold", "int", lo=1000, hi=2000000))),
    Domain(("Staff directory of {company}", "{company} employees {year}"),
           "employee", "employees", (
        Column("Name", "key", maker="person"),
        Column("Department", "cat", ("Sales", "Engineering", "Finance", "Legal", "Support")),
        Column("Office", "cat", ("Lisbon", "Osaka", "Toronto", "Nairobi", "Oslo")),
        Column("Salary", "int", lo=30000, hi=160000), Column("Hire year", "int", lo=1995, hi=2024))),
    Domain(("{year} {region} racing championship", "Drivers standings {year}"),
           "driver", "drivers", (
        Column("Driver", "key", maker="person"),
        Column("Team", "cat", ("Falcon", "Vortex", "Aurora", "Titan", "Comet")),
        Column("Country", "cat", ("Italy", "Finland", "Mexico", "Australia", "Germany")),
        Column("Wins", "int", lo=0, hi=12), Column("Points", "int", lo=0, hi=400),
        Column("Best lap (s)", "dec", lo=70, hi=99))),
    Domain(("{company} inventory", "Product catalogue {year}"), "product", "products", (
        Column("Product", "key", maker="product"),
        Column("Category", "cat", ("Garden", "Kitchen", "Toys", "Office", "Outdoor")),
        Column("Supplier", "cat", ("Acme", "Borealis", "Cobalt", "Dynamo")),
        Column("Price", "dec", lo=2, hi=500), Column("Stock", "int", lo=0, hi=900))),
)

DOMAIN_NAMES = tuple(d.singular for d in DOMAINS)

COMPANIES = ["Northwind", "Bluepeak", "Quanta", "Lumen", "Stratus", "Harbor & Co"]
REGIONS = ["Avalon", "Eastmarch", "Valdoria", "Norland", "Kestria", "Merovia"]


def _key_value(rng: random.Random, maker: str) -> str:
    if maker == "person":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if maker == "title":
        return f"The {rng.choice(ADJ)} {rng.choice(NOUN)}" if rng.random() < 0.5 else \
            f"{rng.choice(ADJ)} {rng.choice(NOUN)}"
    if maker == "place":
        return f"{rng.choice(PLACE_A)}{rng.choice(PLACE_B)}" if rng.random() < 0.6 else \
            f"{rng.choice(PLACE_A)} {rng.choice(PLACE_B).capitalize()}"
    if maker == "product":
        return f"{rng.choice(ADJ)} {rng.choice(NOUN)} {rng.choice(['Mk I', 'Mk II', 'Pro', 'Mini', 'XL'])}"
    raise ValueError(f"unknown key maker {maker!r}")


def _value(rng: random.Random, col: Column) -> str:
    if col.kind == "cat":
        return rng.choice(col.pool)
    if col.kind == "int":
        return str(rng.randint(int(col.lo), int(col.hi)))
    if col.kind == "dec":
        return f"{rng.uniform(col.lo, col.hi):.1f}" if col.hi < 100 else \
            f"{rng.uniform(col.lo, col.hi):.2f}"
    raise ValueError(f"column {col.name}: no value maker for kind {col.kind!r}")


def _q(v: str) -> str:
    return "'" + v.replace("'", "''") + "'"


def _i(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _num(v: str) -> Fraction:
    return Fraction(v)


@dataclasses.dataclass
class _Table:
    domain: Domain
    name: str
    rows: list               # list[list[str]]

    @property
    def cols(self):
        return self.domain.columns

    def col(self, kind: str) -> list:
        return [c for c in self.cols if c.kind == kind]

    def values(self, c: Column) -> list:
        j = self.cols.index(c)
        return [r[j] for r in self.rows]

    def spec(self) -> TableSpec:
        return TableSpec(self.name, tuple(c.name for c in self.cols),
                         tuple(tuple(r) for r in self.rows))


def _domain(name: str) -> Domain:
    for d in DOMAINS:
        if d.singular == name:
            return d
    raise ValueError(f"domain={name!r}: expected one of {DOMAIN_NAMES}")


def _make_table(rng: random.Random, domain: Optional[str] = None,
                table_name: Optional[str] = None) -> _Table:
    d = rng.choice(DOMAINS) if domain is None else _domain(domain)
    if table_name is None:
        name = rng.choice(d.table).format(
            region=rng.choice(REGIONS), year=rng.randint(1990, 2024), decade=rng.choice(
                [1960, 1970, 1980, 1990, 2000]), person=f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            company=rng.choice(COMPANIES))
    else:
        name = table_name
    n = rng.randint(8, 30)
    keys: list = []
    key_col = d.columns[0]
    while len(keys) < n:
        k = _key_value(rng, key_col.maker)
        if k.lower() not in {x.lower() for x in keys}:
            keys.append(k)
    rows = [[k] + [_value(rng, c) for c in d.columns[1:]] for k in keys]
    return _Table(d, name, rows)


class _Skip(Exception):
    """This table cannot host this question (e.g. tied extremes): draw another."""


def _where_cat(t: _Table, rng: random.Random, min_rows: int = 1, max_frac: float = 1.0):
    cats = t.col("cat")
    rng.shuffle(cats)
    for c in cats:
        vals = t.values(c)
        options = sorted({v for v in vals if min_rows <= vals.count(v) <= max_frac * len(vals)})
        if options:
            v = rng.choice(options)
            return c, v, [i for i, x in enumerate(vals) if x == v]
    raise _Skip()


def _question(t: _Table, cat: str, rng: random.Random) -> tuple[str, str]:
    """(description, gold SQL) for category ``cat`` on table ``t``."""
    d = t.domain
    key = d.columns[0]
    T = _i(t.name)
    nums = t.col("int") + t.col("dec")
    ints = t.col("int")
    if cat == "other":
        if rng.random() < 0.6:
            k = rng.choice(t.values(key))
            c = rng.choice(list(d.columns[1:]))
            return (f"What is the {c.name.lower()} of the {d.singular} {k}?",
                    f"SELECT {_i(c.name)} FROM {T} WHERE {_i(key.name)} = {_q(k)}")
        c, v, idx = _where_cat(t, rng, min_rows=2, max_frac=0.5)
        return (f"List the {key.name.lower()} of every {d.singular} whose {c.name.lower()} is "
                f"{v}.", f"SELECT {_i(key.name)} FROM {T} WHERE {_i(c.name)} = {_q(v)}")
    if cat == "counting":
        if rng.random() < 0.5:
            c, v, idx = _where_cat(t, rng)
            return (f"How many {d.plural} have {c.name.lower()} {v}?",
                    f"SELECT COUNT(*) FROM {T} WHERE {_i(c.name)} = {_q(v)}")
        c = rng.choice(nums)
        vals = sorted(_num(x) for x in t.values(c))
        thr = vals[rng.randint(0, len(vals) - 2)]
        if thr == vals[-1]:
            raise _Skip()
        thr_s = str(int(thr)) if thr.denominator == 1 else t.values(c)[
            [_num(x) for x in t.values(c)].index(thr)]
        return (f"How many {d.plural} have a {c.name.lower()} greater than {thr_s}?",
                f"SELECT COUNT(*) FROM {T} WHERE {_i(c.name)} + 0 > {thr_s}")
    if cat == "comparison":
        c = rng.choice(nums)
        a, b = rng.sample(range(len(t.rows)), 2)
        va, vb = _num(t.values(c)[a]), _num(t.values(c)[b])
        if va == vb:
            raise _Skip()
        ka, kb = t.values(key)[a], t.values(key)[b]
        more = rng.random() < 0.5
        word = "higher" if more else "lower"
        return (f"Which {d.singular} has the {word} {c.name.lower()}: {ka} or {kb}?",
                f"SELECT {_i(key.name)} FROM {T} WHERE {_i(key.name)} IN ({_q(ka)}, {_q(kb)}) "
                f"ORDER BY {_i(c.name)} + 0 {'DESC' if more else 'ASC'} LIMIT 1")
    if cat == "ranking":
        c = rng.choice(nums)
        vals = [_num(x) for x in t.values(c)]
        desc = rng.random() < 0.5
        order = sorted(vals, reverse=desc)
        pos = rng.choice([1, 1, 2, 3])
        target = order[pos - 1]
        if vals.count(target) != 1 or (pos > 1 and order[pos - 2] == target):
            raise _Skip()
        word = "highest" if desc else "lowest"
        nth = {1: "", 2: "second ", 3: "third "}[pos]
        return (f"Which {d.singular} has the {nth}{word} {c.name.lower()}?",
                f"SELECT {_i(key.name)} FROM {T} ORDER BY {_i(c.name)} + 0 "
                f"{'DESC' if desc else 'ASC'} LIMIT {pos - 1}, 1")
    if cat.startswith("aggregation-"):
        fn = cat.split("-", 1)[1]
        pool = ints if fn in ("SUM", "AVG") else nums
        c = rng.choice(pool)
        where, cond, idx = "", "", list(range(len(t.rows)))
        if rng.random() < 0.7:
            wc, v, idx = _where_cat(t, rng, min_rows=2)
            where = f" WHERE {_i(wc.name)} = {_q(v)}"
            cond = f" whose {wc.name.lower()} is {v}"
        if fn == "AVG":
            vals = [_num(t.values(c)[i]) for i in idx]
            avg100 = sum(vals) / len(vals) * 100
            if avg100 - (avg100.numerator // avg100.denominator) == Fraction(1, 2):
                raise _Skip()  # a rounding tie could round differently on another engine
            return (f"What is the average {c.name.lower()} of the {d.plural}{cond}? Round the "
                    "result to 2 decimal places.",
                    f"SELECT ROUND(AVG({_i(c.name)} + 0), 2) FROM {T}{where}")
        word = {"SUM": "total", "MIN": "lowest", "MAX": "highest"}[fn]
        return (f"What is the {word} {c.name.lower()} of the {d.plural}{cond}?",
                f"SELECT {fn}({_i(c.name)} + 0) FROM {T}{where}")
    if cat == "INSERT":
        existing = {k.lower() for k in t.values(key)}
        for _ in range(20):
            k = _key_value(rng, key.maker)
            if k.lower() not in existing:
                break
        else:
            raise _Skip()
        vals = [k] + [_value(rng, c) for c in d.columns[1:]]
        desc = ", ".join(f"{c.name.lower()} {v}" for c, v in zip(d.columns, vals))
        return (f"Add a new {d.singular} to the table with {desc}.",
                f"INSERT INTO {T} ({', '.join(_i(c.name) for c in d.columns)}) VALUES "
                f"({', '.join(_q(v) for v in vals)})")
    if cat == "UPDATE":
        r = rng.randrange(len(t.rows))
        k = t.values(key)[r]
        c = rng.choice(list(d.columns[1:]))
        old = t.rows[r][d.columns.index(c)]
        for _ in range(20):
            new = _value(rng, c)
            if new.lower() != old.lower():
                break
        else:
            raise _Skip()
        return (f"Change the {c.name.lower()} of the {d.singular} {k} to {new}.",
                f"UPDATE {T} SET {_i(c.name)} = {_q(new)} WHERE {_i(key.name)} = {_q(k)}")
    if cat == "DELETE":
        if rng.random() < 0.5:
            c, v, idx = _where_cat(t, rng, max_frac=0.5)
            return (f"Delete every {d.singular} whose {c.name.lower()} is {v}.",
                    f"DELETE FROM {T} WHERE {_i(c.name)} = {_q(v)}")
        k = rng.choice(t.values(key))
        return (f"Remove the {d.singular} {k} from the table.",
                f"DELETE FROM {T} WHERE {_i(key.name)} = {_q(k)}")
    raise ValueError(f"category={cat!r}: expected one of {CATEGORIES}")


_ENGINE = SQLiteEngine(statement_timeout_s=10.0)


def _label(spec: TableSpec, sql: str) -> list[str]:
    s = _ENGINE.open_session([spec])
    try:
        rows = s.fetch_all(sql)
    finally:
        s.close()
    return [str(v) for r in rows for v in r]


def _mutation_md5(spec: TableSpec, sql: str) -> str:
    s = _ENGINE.open_session([spec])
    try:
        before = s.table_hash([spec.name])
        r = s.execute(sql)
        if r.error:
            raise RuntimeError(f"generator: gold statement failed: {r.error}\n{sql}")
        after = s.table_hash([spec.name])
    finally:
        s.close()
    if after == before:
        raise _Skip()
    return after


def _check_family(domain: Optional[str], table_name: Optional[str]) -> None:
    if domain is not None:
        _domain(domain)
    if table_name is not None and (not isinstance(table_name, str) or not table_name.strip()):
        raise ValueError(f"table_name={table_name!r}: give a non-empty table name, or None for "
                         "the domain's generated names")


def generate_item(seed: int, index: int, category: Optional[str] = None, *,
                  domain: Optional[str] = None, table_name: Optional[str] = None,
                  describe_table: bool = True) -> dict:
    """Item ``index`` of the stream ``seed`` (category drawn uniformly unless given; domain and
    table name fixed when given, see the module docstring)."""
    _check_family(domain, table_name)
    rng = random.Random(f"dbbench-gen|{int(seed)}|{int(index)}")
    cat = category or rng.choice(CATEGORIES)
    if cat not in CATEGORIES:
        raise ValueError(f"category={cat!r}: expected one of {CATEGORIES}")
    for _ in range(200):
        t = _make_table(rng, domain, table_name)
        try:
            desc, sql = _question(t, cat, rng)
            spec = t.spec()
            item = {
                "description": desc,
                "add_description": (f"The name of this table is {t.name}, and the headers of "
                                    f"this table are {','.join(c.name for c in t.cols)}."
                                    if describe_table else ""),
                "table": {"table_name": t.name, "table_info": {
                    "columns": [{"name": c.name, "type": "TEXT"} for c in t.cols],
                    "rows": [list(r) for r in t.rows]}},
                "type": [cat],
                "source": "harness_jax-generator",
                "seed": [int(seed), int(index)],
            }
            if cat in MUTATION_CATEGORIES:
                item["answer_md5"] = _mutation_md5(spec, sql)
                item["label"] = [sql]
            else:
                label = _label(spec, sql)
                if not label:
                    raise _Skip()
                item["label"] = label
                item["sql"] = {"query": sql}
            return item
        except _Skip:
            continue
    raise RuntimeError(f"generator: no valid {cat} question after 200 tables (seed={seed}, "
                       f"index={index})")


def generate_items(n: int, seed: int = 0, categories: Optional[Sequence[str]] = None,
                   start: int = 0, *, domain: Optional[str] = None,
                   table_name: Optional[str] = None, describe_table: bool = True) -> list[dict]:
    """``n`` items of stream ``seed``; ``categories`` cycles through the given categories
    (balanced), otherwise each item draws its category uniformly; ``domain`` / ``table_name`` /
    ``describe_table`` narrow the family (module docstring)."""
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    cats = list(categories) if categories else None
    if cats:
        bad = [c for c in cats if c not in CATEGORIES]
        if bad:
            raise ValueError(f"categories: unknown {bad}; expected a subset of {CATEGORIES}")
    _check_family(domain, table_name)
    return [generate_item(seed, start + i, cats[(start + i) % len(cats)] if cats else None,
                          domain=domain, table_name=table_name, describe_table=describe_table)
            for i in range(n)]
