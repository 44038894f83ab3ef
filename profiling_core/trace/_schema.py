"""The mirror's SQLite schema: trace_processor's table and column names, types and units.

Hidden tables start with an underscore; the public names are views over them (so that
``slice`` can carry TP's ``cat``/``slice_id`` aliases and ``args`` can be computed lazily).
Times are integer nanoseconds everywhere. All tracks are rows of ``_track``, slice tracks and counter tracks told apart
by ``event_type`` ('slice' / 'counter', as in trace_processor's own track table); the typed views (``thread_track``,
``process_track``, ``counter_track``, ``process_counter_track``) are those rows with their columns, under
trace_processor's names and declared types (a column that is an expression in trace_processor's view is one here).
"""
from __future__ import annotations

TABLES = """
CREATE TABLE process (
  upid INTEGER PRIMARY KEY, id INTEGER, pid INTEGER, name TEXT, start_ts INTEGER, end_ts INTEGER,
  parent_upid INTEGER, uid INTEGER, android_appid INTEGER, android_user_id INTEGER, cmdline TEXT,
  arg_set_id INTEGER, machine_id INTEGER);
CREATE TABLE thread (
  utid INTEGER PRIMARY KEY, id INTEGER, tid INTEGER, name TEXT, start_ts INTEGER, end_ts INTEGER,
  upid INTEGER, is_main_thread INTEGER, is_idle INTEGER, machine_id INTEGER, arg_set_id INTEGER);
CREATE TABLE _track (
  id INTEGER PRIMARY KEY, name TEXT, type TEXT, dimension_arg_set_id INTEGER, parent_id INTEGER,
  source_arg_set_id INTEGER, machine_id INTEGER, track_group_id INTEGER, utid INTEGER, upid INTEGER,
  event_type TEXT NOT NULL, counter_unit TEXT, description TEXT);
CREATE TABLE _slice (
  id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, dur INTEGER NOT NULL, track_id INTEGER NOT NULL,
  category TEXT, name TEXT, depth INTEGER NOT NULL, parent_id INTEGER, arg_set_id INTEGER);
CREATE TABLE flow (
  id INTEGER PRIMARY KEY, slice_out INTEGER, slice_in INTEGER, trace_id INTEGER, arg_set_id INTEGER);
CREATE TABLE counter (
  id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, track_id INTEGER NOT NULL, value DOUBLE, arg_set_id INTEGER);
"""

# Arguments live in their own database file, written by a second thread while the main thread parses.
ARGS_TABLE = "CREATE TABLE _args_raw (arg_set_id INTEGER PRIMARY KEY, raw BLOB NOT NULL);"


VIEWS = """
CREATE VIEW slice AS
  SELECT id, ts, dur, track_id, category, name, depth, parent_id, arg_set_id,
         CAST(NULL AS INTEGER) AS thread_ts, CAST(NULL AS INTEGER) AS thread_dur,
         CAST(NULL AS INTEGER) AS thread_instruction_count,
         CAST(NULL AS INTEGER) AS thread_instruction_delta,
         category AS cat, id AS slice_id
  FROM _slice;
CREATE VIEW track AS
  SELECT id, name, type, dimension_arg_set_id, parent_id, source_arg_set_id, machine_id, track_group_id
  FROM _track;
CREATE VIEW thread_track AS
  SELECT id, name, type, parent_id, source_arg_set_id, machine_id, utid
  FROM _track WHERE utid IS NOT NULL AND event_type = 'slice';
CREATE VIEW process_track AS
  SELECT id, name, type, parent_id, source_arg_set_id, machine_id, upid
  FROM _track WHERE upid IS NOT NULL AND event_type = 'slice';
CREATE VIEW counter_track AS
  SELECT id, name, parent_id, type, dimension_arg_set_id, source_arg_set_id, machine_id, counter_unit AS unit,
         NULL AS description
  FROM _track WHERE event_type = 'counter';
CREATE VIEW process_counter_track AS
  SELECT id, name, type, parent_id, source_arg_set_id, machine_id, counter_unit AS unit, description, upid
  FROM _track WHERE upid IS NOT NULL AND event_type = 'counter';
CREATE VIEW counters AS
  SELECT v.id, v.ts, v.track_id, v.value, v.arg_set_id, t.name, t.unit
  FROM counter v JOIN counter_track t ON v.track_id = t.id ORDER BY v.ts;
"""

# A TEMP view, because it reads the attached args database (a main-schema view may not).
ARGS_VIEW = """
CREATE TEMP VIEW args AS
  SELECT a.arg_set_id * 4294967296 + j.id AS id,
         a.arg_set_id AS arg_set_id,
         _tp_flat_key(j.fullkey) AS flat_key,
         _tp_key(j.fullkey) AS key,
         CASE WHEN j.type IN ('integer', 'true', 'false') THEN j.atom END AS int_value,
         CASE WHEN j.type = 'text' THEN j.atom END AS string_value,
         CASE WHEN j.type = 'real' THEN j.atom END AS real_value,
         CASE j.type WHEN 'integer' THEN 'int' WHEN 'real' THEN 'real' WHEN 'text' THEN 'string'
                     WHEN 'true' THEN 'bool' WHEN 'false' THEN 'bool' ELSE 'null' END AS value_type,
         CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false'
                     ELSE CAST(j.atom AS TEXT) END AS display_value
  FROM argsdb._args_raw a, json_tree(CAST(a.raw AS TEXT)) j
  WHERE j.type NOT IN ('object', 'array', 'null');  -- trace_processor keeps no row for a null
"""

# The indexes the analyses need (created after the bulk insert, which is faster).
INDEXES = """
CREATE INDEX _slice_track_ts ON _slice(track_id, ts);
CREATE INDEX _slice_name ON _slice(name);
CREATE INDEX _slice_category ON _slice(category);
CREATE INDEX _flow_out ON flow(slice_out);
CREATE INDEX _flow_in ON flow(slice_in);
CREATE INDEX _thread_upid ON thread(upid);
CREATE INDEX _track_utid ON _track(utid);
CREATE INDEX _counter_track_ts ON counter(track_id, ts);
"""

PUBLIC_TABLES = ("slice", "thread_track", "process_track", "track", "thread", "process", "flow", "args", "counter",
                 "counter_track", "process_counter_track", "counters")
