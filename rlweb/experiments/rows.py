"""Many rows written at once without a model object each: the events and chart buckets of a busy run.

`bulk_create` builds a model instance per row (its init signals included) and adapts every value of it in Python:
about 40 µs a row, most of a points request's time at 10,000 points a second (benchmarks/client_logging.py). Here
the rows go to PostgreSQL as one JSON array, which the database unpacks (`jsonb_to_recordset`) in the same single
INSERT; other databases (SQLite in development and tests) get `bulk_create`.
"""

from __future__ import annotations

import json

import orjson
from django.db import connection


def json_text(value) -> str:
    """`value` as JSON text: orjson's (ten times as fast as json.dumps on an event), or json.dumps's for what orjson
    refuses (an int past 64 bits). Not for values that may be NaN: orjson writes null."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def json_loads(text: str | bytes):
    """`text` decoded as json.loads does: by orjson (three to five times as fast on buckets and events), or by
    json.loads for what orjson refuses (NaN and Infinity, which scripts' points may carry; an int past 64 bits; not
    UTF-8)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def insert(model, columns: tuple[str, ...], rows_json: str, **constants) -> None:
    """Insert the rows of `rows_json`, a JSON array of objects with (at least) the fields `columns` of `model`,
    each also with the values of `constants` (by attribute name: `run_id`), in one statement. A JSON null is
    SQL's NULL."""
    if connection.vendor != "postgresql":
        model.objects.bulk_create(model(**constants, **{name: row.get(name) for name in columns})
                                  for row in json.loads(rows_json))
        return
    quote = connection.ops.quote_name
    fields = {field.attname: field for field in model._meta.concrete_fields}
    names = ", ".join(quote(fields[name].column) for name in columns)
    types = ", ".join(f"{quote(fields[name].column)} {fields[name].db_type(connection)}" for name in columns)
    fixed = "".join(f"{quote(fields[name].column)}, " for name in constants)
    values = [fields[name].get_db_prep_save(value, connection) for name, value in constants.items()]
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {quote(model._meta.db_table)} ({fixed}{names}) SELECT {'%s, ' * len(values)}"
                       f"{names} FROM jsonb_to_recordset(%s::jsonb) AS rows({types})", [*values, rows_json])
