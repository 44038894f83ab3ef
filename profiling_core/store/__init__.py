"""The store: where runs and calibrations are kept, each landing whole or not at all.

- ``runs``: :class:`RunStore` (one folder per run: ``trace.json``, ``table.txt``, ``meta.json``; written in
  ``.staging/`` and renamed into place; list, open, delete, import a trace, a run or another store) and
  :class:`StoreImport` and :class:`Run`; ``validate_run_id``.
- ``files``: ``read_small_file``, the one reader of the small files the store and the device lock keep (it looks
  at what a path is before reading it, and caps what it reads), and ``read_json_object`` on top of it.
- ``memory``: a run's ``memory_categories.json`` (torch's memory profiler: the bytes of parameters,
  optimizer state, activations, ... over time), read back as a frame by :func:`memory_categories`, and
  :func:`memory_categories_note` (why a run has none).
- ``machines``: the machine a run ran on (:func:`machine_of`: a Ray node, else the device and host its meta.json
  recorded, else the ``UNKNOWN`` machine), runs grouped by machine (:func:`group_by_machine`) and the same config
  matched across machines (:func:`match_configs`, :func:`comparable_config`, ``NOT_COMPARED``).
- ``peaks``: :class:`DevicePeaks` (what a calibration measured), :class:`PeakBook` (the calibrations kept in the
  store's ``.calibrations/``; ``PeakBook.for_run``: the newest of a run's device), and the vendors' datasheets
  (``datasheet_for``).

Nothing here runs torch or a worker; ``profiling_core.run`` writes into the store, every later stage reads it.
"""
from __future__ import annotations

from .files import read_json_object, read_small_file
from .memory import (MEMORY_CATEGORIES, MEMORY_CATEGORIES_COLUMNS, MEMORY_CATEGORIES_FILE, MEMORY_CATEGORY_KNOBS,
                     memory_categories, memory_categories_note)
from .machines import (NOT_COMPARED, UNKNOWN, ConfigMatch, Machine, comparable_config, group_by_machine,
                       machine_of, match_configs)
from .peaks import DATASHEETS, DevicePeaks, PeakBook, datasheet_for
from .runs import Run, RunStore, StoreImport, validate_run_id

__all__ = ["RunStore", "Run", "validate_run_id", "read_json_object", "read_small_file", "DevicePeaks", "PeakBook",
           "DATASHEETS", "datasheet_for", "memory_categories", "memory_categories_note", "MEMORY_CATEGORIES",
           "MEMORY_CATEGORIES_COLUMNS", "MEMORY_CATEGORIES_FILE", "MEMORY_CATEGORY_KNOBS", "StoreImport", "Machine",
           "UNKNOWN", "machine_of", "group_by_machine", "comparable_config", "NOT_COMPARED", "ConfigMatch",
           "match_configs"]
