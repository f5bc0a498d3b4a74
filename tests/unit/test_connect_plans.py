"""An attempt's Spark Connect plans before they leave its client (worker/connect_plans.py): relative paths
made absolute in the attempt's directory, catalog writes, reads by name of tables the attempt did not create
and Python functions for the server noticed. On the installed pyspark's protos, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.connect.proto import (base_pb2, catalog_pb2, commands_pb2, expressions_pb2, ml_pb2, pipelines_pb2,
                                        relations_pb2)
from pyspark.sql.connect.utils import get_python_ver

from sparkyard.worker.connect_plans import SQL_READ, OwnTables, inspect, is_relative, sql_catalog_write, sql_reads
from sparkyard.worker.connect_server import default_fs

CWD = "/jobs/run-1"


def _read(*paths: str, fmt: str = "", streaming: bool = False, **options: str) -> relations_pb2.Relation:
    relation = relations_pb2.Relation()
    source = relation.read.data_source
    if fmt:
        source.format = fmt
    source.paths.extend(paths)
    source.options.update(options)
    relation.read.is_streaming = streaming
    return relation


@pytest.mark.parametrize(("path", "relative"), [
    ("data/x.csv", True), ("out", True), ("./chk", True), ("data/part-*.txt", True), ("../up", True),
    ("/abs/x", False), ("file:/abs/x", False), ("file:///abs/x", False), ("s3a://bucket/x", False),
    ("hdfs://nn:8020/x", False), ("", False), ("dir/a:b", True)])
def test_a_path_is_relative_as_hadoop_reads_it(path: str, relative: bool) -> None:
    assert is_relative(path) is relative


def test_a_reader_s_paths_and_path_options_resolve_in_the_attempt_s_directory_through_the_whole_plan() -> None:
    plan = base_pb2.Plan()
    join = plan.root.join
    join.left.CopyFrom(_read("data/x.csv", "/abs/y.csv", fmt="csv", basePath="data"))
    join.right.filter.input.CopyFrom(_read(fmt="parquet", path="in/./p"))
    found = inspect(plan, CWD)
    left, right = join.left.read.data_source, join.right.filter.input.read.data_source
    assert list(left.paths) == [f"{CWD}/data/x.csv", "/abs/y.csv"] and left.options["basePath"] == f"{CWD}/data"
    assert right.options["path"] == f"{CWD}/in/p"
    assert found.relative == ["data/x.csv", "data", "in/./p"] and found.catalog == []


def test_a_source_that_may_read_its_path_as_a_name_is_left_alone() -> None:
    relation = _read("db.events", fmt="iceberg")
    assert inspect(relation, CWD).relative == [] and list(relation.read.data_source.paths) == ["db.events"]


def test_a_stream_s_checkpoint_and_sink_resolve_and_a_non_file_sink_keeps_only_its_checkpoint_resolved() -> None:
    command = commands_pb2.Command()
    start = command.write_stream_operation_start
    start.input.CopyFrom(_read("stream_in", fmt="parquet", streaming=True))
    start.format = "parquet"
    start.options.update({"checkpointLocation": "chk_stream", "path": "stream_out"})
    start.path = "other_out"
    noop = commands_pb2.WriteStreamOperationStart(format="noop", options={"checkpointlocation": "chk2", "path": "x"})
    found = inspect(command, CWD)
    assert start.options["checkpointLocation"] == f"{CWD}/chk_stream" and start.options["path"] == f"{CWD}/stream_out"
    assert start.path == f"{CWD}/other_out"
    assert start.input.read.data_source.paths[0] == f"{CWD}/stream_in"
    assert sorted(found.relative) == ["chk_stream", "other_out", "stream_in", "stream_out"]
    inspect(noop, CWD)
    assert dict(noop.options) == {"checkpointlocation": f"{CWD}/chk2", "path": "x"}


def test_without_a_directory_relative_paths_are_only_reported() -> None:
    write = commands_pb2.WriteOperation(path="out/x", options={"PATH": "out/y"})
    found = inspect(write, None)
    assert (write.path, write.options["PATH"]) == ("out/x", "out/y") and found.relative == ["out/x", "out/y"]


def test_an_unset_path_stays_unset_so_that_a_table_write_keeps_its_target() -> None:
    write = commands_pb2.WriteOperation(source="parquet")
    write.table.table_name = "events"
    write.table.save_method = commands_pb2.WriteOperation.SaveTable.TABLE_SAVE_METHOD_SAVE_AS_TABLE
    found = inspect(write, CWD)
    assert write.WhichOneof("save_type") == "table" and found.catalog == ["saveAsTable('events')"]
    stream = commands_pb2.WriteStreamOperationStart(table_name="sink", options={"checkpointLocation": "c"})
    found = inspect(stream, CWD)
    assert stream.WhichOneof("sink_destination") == "table_name" and found.catalog == ["toTable('sink')"]
    assert stream.options["checkpointLocation"] == f"{CWD}/c"


def test_catalog_paths_ml_paths_and_an_analyze_request_s_relation() -> None:
    catalog = relations_pb2.Relation()
    catalog.catalog.create_table.CopyFrom(catalog_pb2.CreateTable(table_name="t", path="tables/t"))
    refresh = catalog_pb2.RefreshByPath(path="tables")
    save = ml_pb2.MlCommand(write=ml_pb2.MlCommand.Write(path="models/m"))
    persist = base_pb2.AnalyzePlanRequest()
    persist.persist.relation.CopyFrom(_read("cached"))
    found = [inspect(m, CWD) for m in (catalog, refresh, save, persist)]
    assert catalog.catalog.create_table.path == f"{CWD}/tables/t" and found[0].catalog == ["catalog.createTable('t')"]
    assert refresh.path == f"{CWD}/tables" and save.write.path == f"{CWD}/models/m"
    assert persist.persist.relation.read.data_source.paths[0] == f"{CWD}/cached"


def test_resolving_twice_changes_nothing_more() -> None:
    relation = _read("data/x.csv")
    inspect(relation, CWD)
    again = inspect(relation, CWD)
    assert again.relative == [] and relation.read.data_source.paths[0] == f"{CWD}/data/x.csv"


@pytest.mark.parametrize(("message", "call"), [
    (commands_pb2.WriteOperationV2(table_name="db.t"), "writeTo('db.t')"),
    (commands_pb2.MergeIntoTableCommand(target_table_name="t"), "mergeInto('t')"),
    (catalog_pb2.CreateDatabase(db_name="sales"), "catalog.createDatabase('sales')"),
    (catalog_pb2.DropTable(table_name="t"), "catalog.dropTable('t')"),
    (commands_pb2.CreateDataFrameViewCommand(name="shared", is_global=True), "createGlobalTempView('shared')"),
    (commands_pb2.SqlCommand(input=relations_pb2.Relation(sql=relations_pb2.SQL(query="CREATE DATABASE x"))),
     "CREATE DATABASE"),
])
def test_writes_to_the_shared_catalog_are_noticed(message: object, call: str) -> None:
    assert inspect(message, CWD).catalog == [call]


def test_session_scoped_views_are_not_catalog_writes() -> None:
    view = commands_pb2.CreateDataFrameViewCommand(name="local", is_global=False)
    assert inspect(view, CWD).catalog == []


@pytest.mark.parametrize(("statement", "words"), [
    ("CREATE TABLE t (a INT)", "CREATE TABLE"), ("create or replace view v as select 1", "CREATE OR REPLACE VIEW"),
    ("  -- a comment\n/* another */ CREATE EXTERNAL TABLE t LOCATION '/x'", "CREATE EXTERNAL TABLE"),
    ("CREATE GLOBAL TEMP VIEW g AS SELECT 1", "CREATE GLOBAL TEMP VIEW"), ("CREATE SCHEMA s", "CREATE SCHEMA"),
    ("DROP TABLE IF EXISTS t", "DROP TABLE"), ("INSERT INTO t VALUES (1)", "INSERT INTO"),
    ("insert overwrite table t select 1", "INSERT OVERWRITE"), ("ALTER TABLE t ADD COLUMN b INT", "ALTER TABLE"),
    ("TRUNCATE TABLE t", "TRUNCATE TABLE"), ("CREATE FUNCTION f AS 'x.Y'", "CREATE FUNCTION"),
    ("SELECT * FROM t", ""), ("CREATE TEMPORARY VIEW v AS SELECT 1", ""), ("CREATE OR REPLACE TEMP VIEW v AS SELECT 1", ""),
    ("CREATE TEMPORARY FUNCTION f AS 'x.Y'", ""), ("DROP VIEW v", ""), ("DROP TEMPORARY FUNCTION f", ""),
    ("INSERT OVERWRITE LOCAL DIRECTORY '/tmp/x' SELECT 1", ""), ("USE sales", ""), ("SHOW TABLES", ""),
    ("WITH c AS (SELECT 1) INSERT INTO t SELECT * FROM c", ""),  # documented limit: leading words only
])
def test_a_sql_statement_s_leading_words_say_whether_it_writes_to_the_catalog(statement: str, words: str) -> None:
    assert sql_catalog_write(statement) == words


def test_the_server_s_default_filesystem_from_its_conf_or_the_hadoop_configuration(tmp_path: Path) -> None:
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://nn:8020</value></property>"
        "</configuration>")
    assert default_fs({}, {}) == ""
    assert default_fs({"spark.hadoop.fs.defaultFS": "file:///"}, {"HADOOP_CONF_DIR": str(tmp_path)}) == ""
    assert default_fs({}, {"HADOOP_CONF_DIR": str(tmp_path)}) == "hdfs://nn:8020"
    assert default_fs({"spark.hadoop.fs.defaultFS": "s3a://b"}, {}) == "s3a://b"
    (tmp_path / "core-site.xml").write_text("<configuration")
    assert default_fs({}, {"YARN_CONF_DIR": str(tmp_path)}) == ""


def test_what_an_attempt_caches_is_noticed_with_its_paths_resolved_so_that_it_can_be_uncached() -> None:
    persist = base_pb2.AnalyzePlanRequest()
    persist.persist.relation.CopyFrom(_read("cached"))
    table = relations_pb2.Relation()
    table.catalog.cache_table.CopyFrom(catalog_pb2.CacheTable(table_name="db.events"))
    cached = inspect(persist, CWD)
    assert [r.read.data_source.paths[0] for r in cached.persisted] == [f"{CWD}/cached"]  # as the server caches it
    assert inspect(table, CWD).cached_tables == ["db.events"]
    for statement, name in [("CACHE TABLE sales", "sales"), ("  cache lazy table `my t` AS SELECT 1", "`my t`"),
                            ("/* x */ CACHE TABLE db.t OPTIONS ('storageLevel' 'DISK_ONLY')", "db.t")]:
        sql = relations_pb2.Relation()
        sql.sql.query = statement
        assert inspect(sql, CWD).cached_tables == [name], statement
    for statement in ["UNCACHE TABLE sales", "SELECT 'CACHE TABLE x'", "CLEAR CACHE"]:
        sql = relations_pb2.Relation()
        sql.sql.query = statement
        assert inspect(sql, CWD).cached_tables == [], statement


def test_listings_and_lookups_of_the_shared_catalog_are_noticed() -> None:
    tables = relations_pb2.Relation()
    tables.catalog.list_tables.CopyFrom(catalog_pb2.ListTables())
    exists = relations_pb2.Relation()
    exists.catalog.table_exists.CopyFrom(catalog_pb2.TableExists(table_name="events"))
    assert inspect(tables, CWD).catalog_reads == ["catalog.listTables()"]
    assert inspect(exists, CWD).catalog_reads == ["catalog.tableExists()"]
    for statement, seen in [("SHOW TABLES", ["SHOW TABLES"]), ("show  databases like 'x*'", ["SHOW DATABASES"]),
                            ("SELECT 1", []), ("SHOW CREATE TABLE t", [])]:
        sql = relations_pb2.Relation()
        sql.sql.query = statement
        assert inspect(sql, CWD).catalog_reads == seen, statement


@pytest.mark.parametrize(("statement", "relative"), [
    ("CREATE TABLE t (id INT) USING parquet LOCATION 'tables/t'", ["tables/t"]),
    ("CREATE TABLE t USING csv OPTIONS (path 'data/x.csv', header 'true')", ["data/x.csv"]),
    ("SELECT * FROM parquet.`out/part` JOIN json.`/abs/j`", ["out/part"]),
    ("CREATE TABLE t USING parquet LOCATION '/abs/t'", []), ("SELECT 'path' AS x", []),
    ("SELECT * FROM files WHERE path = 'a/b'", []), ("CREATE TABLE t USING csv OPTIONS (path = 'rel')", ["rel"]),
    ("SELECT * FROM delta.`s3a://b/t`", [])])
def test_relative_paths_inside_sql_text_are_noticed_not_rewritten(statement: str, relative: list[str]) -> None:
    sql = relations_pb2.Relation()
    sql.sql.query = statement
    assert inspect(sql, CWD).sql_relative == relative
    assert sql.sql.query == statement


def _sql_command(statement: str) -> commands_pb2.Command:
    command = commands_pb2.Command()
    command.sql_command.input.sql.query = statement
    return command


def _named(name: str, streaming: bool = False) -> relations_pb2.Relation:
    relation = relations_pb2.Relation()
    relation.read.named_table.unparsed_identifier = name
    relation.read.is_streaming = streaming
    return relation


def _view(name: str, is_global: bool = False) -> commands_pb2.Command:
    command = commands_pb2.Command()
    command.create_dataframe_view.CopyFrom(commands_pb2.CreateDataFrameViewCommand(name=name, is_global=is_global))
    command.create_dataframe_view.input.CopyFrom(_read("data/x.csv", fmt="csv"))
    return command


def _save_as_table(name: str) -> commands_pb2.WriteOperation:
    write = commands_pb2.WriteOperation()
    write.table.table_name = name
    return write


@pytest.mark.parametrize(("message", "made"), [
    (_view("Local"), ["local"]), (_view("Shared", is_global=True), ["global_temp.shared"]),
    (_save_as_table("`default`.Events"), ["events"]),
    (commands_pb2.WriteOperationV2(table_name="spark_catalog.default.T2"), ["t2"]),
    (commands_pb2.WriteStreamOperationStart(table_name="sink"), ["sink"]),
    (catalog_pb2.CreateTable(table_name="db.t"), ["db.t"]),
    (_sql_command("CREATE OR REPLACE TEMP VIEW v AS SELECT 1"), ["v"]),
    (_sql_command("create global temporary view g as select 1"), ["global_temp.g"]),
    (_sql_command("CREATE TABLE IF NOT EXISTS `Sales`.`T` (a INT)"), ["sales.t"]),
    (_sql_command("/* x */ CREATE EXTERNAL TABLE e USING csv LOCATION '/x'"), ["e"]),
    (_sql_command("REPLACE TABLE r USING parquet AS SELECT 1"), ["r"]),
    (_sql_command("CACHE LAZY TABLE c OPTIONS ('storageLevel' 'DISK_ONLY') AS SELECT 1"), ["c"]),
    (_sql_command("cache table c2 select 1"), ["c2"]), (_sql_command("CACHE TABLE t OPTIONS ('a' 'b');"), []),
    (_sql_command("CACHE TABLE t"), []),
    (_sql_command("SELECT * FROM v"), []), (_sql_command("CREATE FUNCTION f AS 'x.Y'"), []),
    (_sql_command("CREATE DATABASE d"), []), (_sql_command("INSERT INTO t VALUES (1)"), []),
])
def test_the_tables_and_views_a_plan_creates_are_noticed_by_name(message: object, made: list[str]) -> None:
    assert inspect(message, CWD).made == made


def test_a_read_by_name_of_a_table_the_attempt_did_not_create_is_told_apart_from_one_of_its_own() -> None:
    own = OwnTables()
    reads = inspect(_named("events"), CWD)
    assert reads.named_reads == [("spark.table", "events")] and own.others(reads) == [("spark.table", "events")]
    for creation in (_view("numbers"), _save_as_table("default.`Sales`"),
                     _sql_command("CREATE TEMP VIEW late AS SELECT 1"), _view("g", is_global=True)):
        assert own.others(inspect(creation, CWD)) == []
    for name in ("numbers", "NUMBERS", "`numbers`", "sales", "spark_catalog.default.sales", "late", "global_temp.g"):
        assert own.others(inspect(_named(name), CWD)) == [], name
    # Another job's names, and a global view's name read without its database, are not the attempt's.
    assert own.others(inspect(_named("other_db.numbers", streaming=True), CWD)) == [
        ("readStream.table", "other_db.numbers")]
    assert own.others(inspect(_named("g"), CWD)) == [("spark.table", "g")]
    # A plan that creates a view and reads it (a view over itself is Spark's to refuse) counts it as its own.
    both = base_pb2.ExecutePlanRequest()
    both.plan.command.CopyFrom(_view("fresh"))
    both.plan.command.create_dataframe_view.input.CopyFrom(_named("fresh"))
    assert OwnTables().others(inspect(both, CWD)) == []
    assert OwnTables().others(inspect(_named("numbers"), CWD)) == [("spark.table", "numbers")]  # per attempt


def test_a_declarative_pipeline_s_flows_reading_its_own_datasets_are_not_reads_of_other_tables() -> None:
    flow = pipelines_pb2.PipelineCommand()
    flow.define_flow.flow_name = "big_orders"
    flow.define_flow.relation_flow_details.relation.filter.input.CopyFrom(_named("orders"))
    request = base_pb2.ExecutePlanRequest()
    request.plan.command.pipeline_command.CopyFrom(flow)
    assert inspect(request, CWD).named_reads == [] and inspect(flow, CWD).pipeline


def _python_udf(name: str) -> expressions_pb2.CommonInlineUserDefinedFunction:
    return expressions_pb2.CommonInlineUserDefinedFunction(
        function_name=name, python_udf=expressions_pb2.PythonUDF(eval_type=100, command=b"\x80\x05.",
                                                                 python_ver=get_python_ver()))


def test_the_python_functions_a_plan_sends_to_the_server_are_noticed_wherever_they_are() -> None:
    project = relations_pb2.Relation()
    project.project.input.CopyFrom(_read("data/x.csv"))
    call = project.project.expressions.add().unresolved_function
    call.arguments.add().common_inline_user_defined_function.CopyFrom(_python_udf("parse"))
    mapped = relations_pb2.Relation()
    mapped.map_partitions.func.CopyFrom(_python_udf("enrich"))
    grouped = relations_pb2.Relation()
    grouped.group_map.func.CopyFrom(_python_udf("per_group"))
    udtf = relations_pb2.Relation()
    udtf.common_inline_user_defined_table_function.function_name = "Explode"
    udtf.common_inline_user_defined_table_function.python_udtf.python_ver = get_python_ver()
    source = commands_pb2.Command()
    source.register_data_source.name = "mine"
    source.register_data_source.python_data_source.python_ver = get_python_ver()
    foreach = commands_pb2.WriteStreamOperationStart()
    foreach.foreach_batch.python_function.python_ver = get_python_ver()
    registered = commands_pb2.Command()
    registered.register_function.CopyFrom(_python_udf("by_name"))
    for message, function in [
            (project, "the Python function 'parse'"), (mapped, "the Python function 'enrich'"),
            (grouped, "the Python function 'per_group'"), (udtf, "the Python UDTF 'Explode'"),
            (source, "the Python data source 'mine'"),
            (foreach, "a stream's Python foreach/foreachBatch function"),
            (registered, "the Python function 'by_name'")]:
        assert inspect(message, CWD).functions == [function], function
    assert inspect(project, CWD, functions=False).functions == []  # once said, not looked for again


def test_a_plan_without_a_python_function_has_none_noticed() -> None:
    scala = relations_pb2.Relation()
    scala.project.input.CopyFrom(_named("t"))
    udf = scala.project.expressions.add().common_inline_user_defined_function
    udf.function_name = "jvm_side"
    udf.scalar_scala_udf.payload = b"x"
    # The Python version as a string literal: what the walk for functions waits for, without a function.
    scala.project.expressions.add().literal.string = get_python_ver()
    for message in (scala, _read("data/x.csv"), _sql_command("SELECT 1"), _view("v")):
        assert inspect(message, CWD).functions == []


@pytest.mark.parametrize("statement, reads", [
    ("SELECT * FROM events", ["events"]),
    ("select a from `db`.`t` join other o on o.id = a.id", ["`db`.`t`", "other"]),
    ("WITH x AS (SELECT 1), y AS (SELECT * FROM x) SELECT * FROM y JOIN z", ["z"]),  # its own WITH names
    ("SELECT EXTRACT(DAY FROM d), TRIM(BOTH ' ' FROM s), a IS DISTINCT FROM b FROM orders", ["orders"]),
    ("SELECT * FROM range(10)", []), ("SELECT * FROM (SELECT 1) t", []), ("SELECT * FROM VALUES (1), (2)", []),
    ("SELECT * FROM parquet.`data/x`", []),  # a file queried in place
    ("SELECT 'from t' -- from u\n FROM v /* from w */", ["v"]),  # not in strings or comments
])
def test_the_names_sql_text_reads_tables_by(statement: str, reads: list[str]) -> None:
    assert sql_reads(statement) == reads


def test_a_sql_read_of_a_table_the_attempt_did_not_create_is_told_and_one_of_its_own_is_not() -> None:
    own = OwnTables()
    assert own.others(inspect(_sql_command("SELECT count(*) FROM events"), CWD)) == [(SQL_READ, "events")]
    assert own.others(inspect(_view("numbers"), CWD)) == []
    assert own.others(inspect(_sql_command("SELECT * FROM numbers JOIN numbers n2"), CWD)) == []
    # A write or a listing of the shared catalog is said as such, not as a read.
    for statement in ("INSERT INTO t SELECT * FROM events", "SHOW TABLES FROM db"):
        assert inspect(_sql_command(statement), CWD).named_reads == [], statement
