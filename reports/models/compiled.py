"""Reads (and a few updates) made for every report, upload, page or call of a task,
compiled by the ORM once and then reused.

A claim and the reads that follow it are a dozen small statements, each built and compiled
by the ORM for every report: about nine tenths of their time is that compiling, not the
database's work, and the first text waits for all of it. The same holds for an upload's
answer, a page's place in line, and the session and user of every request. A
`CompiledRead` keeps the
ORM's SQL for each shape of its query (per database) and, after that, only fills in the
parameters and converts the rows as the ORM would.

The SQL stays the ORM's, so what a query means is written once, as a queryset. What a
compiled read adds is the list of its parameters; the first time each shape is compiled,
that list is checked against the ORM's own, and a difference raises. A `CompiledUpdate`
does the same for a queryset's `update(**values)`, and a `CompiledInsert` for the insert of
new rows that `Model.objects.create` and `bulk_create` make.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models import Field, Model, QuerySet, signals
from django.db.models.expressions import DatabaseDefault
from django.db.models.sql import InsertQuery, UpdateQuery


class ParametersDiffer(AssertionError):
    """A compiled read's parameters are not those the ORM compiled for the same query."""


@dataclass(frozen=True)
class _Compiled:
    sql: str
    # The ORM's expressions of the columns read whose values it converts on this database,
    # by position: whether a column has converters is the database's, so it is found once
    # (most have none), and each read asks only these for theirs.
    converted: list[tuple[int, object]]
    model: type  # for a read of model instances: the model and its columns' names
    names: list[str]
    annotations: dict[str, int]  # and the position of each annotation it reads

    def instance(self, row: Sequence, using: str):
        """A row of a read of model instances as the ORM's ModelIterable makes it."""
        found = self.model.from_db(using, self.names, row[: len(self.names)])
        for name, position in self.annotations.items():
            setattr(found, name, row[position])
        return found

    def convert(self, rows: list, connection) -> list:
        """The rows as the ORM's compiler converts them (`get_converters`,
        `apply_converters`), with the converters of `connection`."""
        if not self.converted:
            return rows
        converters = [
            (position, _converters(column, connection), column)
            for position, column in self.converted
        ]
        converted = []
        for row in map(list, rows):
            for position, found, column in converters:
                value = row[position]
                for converter in found:
                    value = converter(value, column, connection)
                row[position] = value
            converted.append(row)
        return converted


def _converters(column, connection) -> list:
    return connection.ops.get_db_converters(column) + column.get_db_converters(connection)


def _converted(columns: Sequence, connection) -> list[tuple[int, object]]:
    """The columns among `columns` whose values the ORM converts on `connection`'s database,
    with their positions (`_Compiled.converted`)."""
    return [(i, column) for i, column in enumerate(columns) if _converters(column, connection)]


def _same(what, sql: str, orm_values, values: list) -> str:
    """`sql`, once the parameters prepared here are the ORM's own; else raise."""
    if list(map(_plain, orm_values)) != list(map(_plain, values)):
        raise ParametersDiffer(f"{what}: {values!r} where the ORM has {orm_values!r}")
    return sql


def _plain(value):
    """A parameter as it compares: psycopg's JSON wrappers (no equality of their own) by the
    value they wrap."""
    return (type(value), value.obj) if type(value).__name__ in ("Json", "Jsonb") else value


class _Statement:
    """What a compiled read and a compiled update share: the parameters, prepared by their
    fields, and the statement kept per database and shape."""

    def __init__(
        self,
        build: Callable[..., QuerySet],
        parameters: Callable[..., Iterable[tuple[Field, object]]],
        shape: Callable[..., Hashable] = lambda *args: (),
    ):
        self._build = build
        self._parameters = parameters
        self._shape = shape
        # By database, not by connection: a connection is one thread's, and nothing kept
        # here may hold it (its thread's end closes it).
        self._by_database: dict[tuple[str, str, Hashable], _Compiled] = {}

    def _prepared(self, args, connection) -> list:
        return [
            field.get_db_prep_value(value, connection, prepared=False)
            for field, value in self._parameters(*args)
        ]

    def _statement(self, args, connection, values) -> _Compiled:
        key = (connection.alias, connection.vendor, self._shape(*args))
        statement = self._by_database.get(key)
        if statement is None:
            statement = self._by_database[key] = self._compile(connection, args, values)
        return statement

    def _checked(self, compiler, values) -> str:
        sql, orm_values = compiler.as_sql()
        return _same(self._build, sql, orm_values, values)

    def _compile(self, connection, args, values) -> _Compiled:
        raise NotImplementedError


class CompiledRead(_Statement):
    """One read, written as a queryset, whose SQL is compiled once per database and shape.

    `build(*args)` returns the queryset (a `values_list`, so rows come back as tuples, or
    a plain one for `instance`); `parameters(*args)` returns, in the order the ORM puts
    them, (field, value) for each parameter, the value as the caller has it (the field
    prepares it for the database). `shape(*args)` names what changes the SQL text besides
    the values (how many items an `IN` holds, an optional condition): calls of one shape
    share one compiled statement.
    """

    def rows(self, *args, using: str = "default") -> list[Sequence]:
        return self._run(args, using)[1]

    def first(self, *args, using: str = "default") -> Sequence | None:
        rows = self.rows(*args, using=using)
        return rows[0] if rows else None

    def instance(self, *args, using: str = "default"):
        """The first row as a model instance, with its annotations, for a `build` that
        returns model instances (a plain queryset), as the ORM's `first()` would give it;
        None when there is none."""
        statement, rows = self._run(args, using)
        return statement.instance(rows[0], using) if rows else None

    def instances(self, *args, using: str = "default") -> list:
        """Every row as a model instance, with its annotations (see `instance`)."""
        statement, rows = self._run(args, using)
        return [statement.instance(row, using) for row in rows]

    def _run(self, args, using: str) -> tuple[_Compiled, list[Sequence]]:
        connection = connections[using]
        values = self._prepared(args, connection)
        statement = self._statement(args, connection, values)
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, values)
            rows = cursor.fetchall()
        return statement, statement.convert(rows, connection)

    def _compile(self, connection, args, values) -> _Compiled:
        queryset = self._build(*args)
        compiler = queryset.query.get_compiler(connection=connection)
        sql = self._checked(compiler, values)
        selected = compiler.select[: compiler.col_count]
        names, annotations = [], {}  # as the ORM's ModelIterable finds them
        if compiler.klass_info and not queryset.query.values_select:
            fields = compiler.klass_info["select_fields"]
            names = [selected[i][0].target.attname for i in range(fields[0], fields[-1] + 1)]
            annotations = compiler.annotation_col_map
        columns = _converted([column for column, _, _ in selected], connection)
        return _Compiled(sql, columns, queryset.model, names, annotations)


class CompiledUpdate(_Statement):
    """`build(*args).update(**values(*args))`, compiled once per database and shape.

    `parameters` lists the update's values first (in `values`' order; a None, or an
    expression without parameters, has none), then the filter's."""

    def __init__(
        self,
        build: Callable[..., QuerySet],
        values: Callable[..., dict],
        parameters: Callable[..., Iterable[tuple[Field, object]]],
        shape: Callable[..., Hashable] = lambda *args: (),
    ):
        super().__init__(build, parameters, shape)
        self._values = values

    def count(self, *args, using: str = "default") -> int:
        """Run the update; return the rows it changed."""
        connection = connections[using]
        values = self._prepared(args, connection)
        statement = self._statement(args, connection, values)
        with connection.cursor() as cursor:
            cursor.execute(statement.sql, values)
            return cursor.rowcount

    def _compile(self, connection, args, values) -> _Compiled:
        query = self._build(*args).query.chain(UpdateQuery)
        query.add_update_values(self._values(*args))
        compiler = query.get_compiler(connection=connection)
        return _Compiled(self._checked(compiler, values), [], query.model, [], {})


class CompiledInsert:
    """The insert of new rows of `model`, as `Model.objects.create` (one row) and
    `bulk_create` (several) make it, compiled once per database and shape: the number of
    rows, and the columns a database default fills.

    `insert(objs)` fills in each row's values as the ORM would (each field's `pre_save` and
    its preparation for the database), runs the ORM's own SQL, and sets on each object
    what the database returned (its id, its database defaults), as `create` does. For a
    model nothing listens to the saves of (its `pre_save` and `post_save` signals, which
    this path does not send), with values rather than expressions, and foreign keys given
    as ids or saved objects.
    """

    def __init__(self, model: type[Model]):
        self._model = model
        self._by_database: dict[tuple[str, str, Hashable], _Insert] = {}

    def insert(self, objs: Sequence[Model], using: str = "default") -> None:
        connection = connections[using]
        meta = self._model._meta
        with_pk = objs[0].pk is not None
        if any((obj.pk is not None) != with_pk for obj in objs):
            raise TypeError(f"{self._model.__name__}: some rows have their id and some not")
        fields = [
            f
            for f in meta.local_concrete_fields
            if not f.generated and (with_pk or f is not meta.auto_field)
        ]
        saved = [[field.pre_save(obj, add=True) for field in fields] for obj in objs]
        defaulted = tuple(
            len(fields) > 1 and _left_to_the_database(field, [row[i] for row in saved])
            for i, field in enumerate(fields)
        )
        rows = [
            [
                field.get_db_prep_save(value, connection)
                for field, value, default in zip(fields, row, defaulted, strict=True)
                if not _expression(field, value, default)
            ]
            for row in saved
        ]
        key = (connection.alias, connection.vendor, (len(objs), with_pk, defaulted))
        statement = self._by_database.get(key)
        if statement is None:
            statement = self._by_database[key] = self._compile(connection, objs, fields, rows)
        with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
            cursor.execute(statement.sql, statement.parameters(rows))
            returned = cursor.fetchall() if statement.returning else []
        returned = statement.compiled.convert(returned, connection)
        for obj, row in zip(objs, returned or [()] * len(objs), strict=True):
            for field, value in zip(statement.returning, row, strict=True):
                setattr(obj, field.attname, value)
            obj._state.adding, obj._state.db = False, using

    def _compile(self, connection, objs, fields, rows) -> _Insert:
        model = self._model
        if signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model):
            raise TypeError(f"{model.__name__}: its saves are listened to; use the ORM's")
        returning = list(model._meta.db_returning_fields)
        features = connection.features
        if returning and not (
            features.can_return_columns_from_insert
            and (len(objs) == 1 or features.can_return_rows_from_bulk_insert)
        ):
            raise TypeError(f"{connection.vendor} returns no columns from an insert")
        query = InsertQuery(model)
        # Raw: the values as `insert` found them, not a second `pre_save` of each.
        query.insert_values(fields, objs, raw=True)
        compiler = query.get_compiler(connection=connection)
        compiler.returning_fields = returning
        [(sql, orm_values)] = compiler.as_sql()
        columns = [field.get_col(model._meta.db_table) for field in returning]
        columns = _converted(columns, connection)
        statement = _Insert(_Compiled(sql, columns, model, [], {}), returning, by_column=False)
        if len(objs) > 1 and len(orm_values) != sum(map(len, rows)):
            # PostgreSQL's insert of several rows: an array a column (`UNNEST`).
            statement = _Insert(statement.compiled, returning, by_column=True)
        _same(model, sql, orm_values, statement.parameters(rows))
        return statement


@dataclass(frozen=True)
class _Insert:
    compiled: _Compiled
    returning: list[Field]  # what the database returns of each row, in its order
    by_column: bool  # the parameters an array a column, not each row's values in turn

    @property
    def sql(self) -> str:
        return self.compiled.sql

    def parameters(self, rows: list[list]) -> list:
        if self.by_column:
            return [list(column) for column in zip(*rows, strict=True)]
        return [value for row in rows for value in row]


def _left_to_the_database(field: Field, values: list) -> bool:
    """Whether every row leaves `field` to its database default, which the ORM then leaves
    out of the insert; some rows but not all is not this path's."""
    defaults = sum(isinstance(value, DatabaseDefault) for value in values)
    if 0 < defaults < len(values):
        raise TypeError(f"{field}: some rows but not all leave it to the database default")
    return defaults > 0


def _expression(field: Field, value, default: bool) -> bool:
    """Whether a value is the SQL's, not a parameter: a database default the ORM leaves to
    the database. Any other expression is not this path's."""
    if isinstance(value, DatabaseDefault) and default:
        return True
    if hasattr(value, "resolve_expression"):
        raise TypeError(f"{field}: a compiled insert takes values, not {value!r}")
    return False
