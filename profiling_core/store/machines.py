"""The machine a run ran on, runs grouped by machine, and the same config matched across machines.

A run's machine is read from its meta.json alone (nothing here opens a trace):

- a run made on a Ray cluster's node (``profiling_core.run.cluster``) has ``meta["node"]``: its ``hostname`` and
  ``device_name`` name the machine;
- a run made here (or imported from another store with :meth:`RunStore.import_store`, which keeps its meta.json)
  has the device facts its worker recorded (``meta["device"]["name"]``: the GPU's name, or the CPU's model; else
  ``meta["device"]["type"]``) and the host it ran on (``meta["host"]["hostname"]``);
- an imported trace (``import``, a Trace lab upload) has neither: its meta.json's ``host`` is the machine that
  imported it, not the one that recorded it, so it is the :data:`UNKNOWN` machine, said as such.

A machine is (host, device): a CPU run and a GPU run of one host are two machines, as two hosts with the same GPU
are. Values that are not strings (a damaged or hostile meta.json) count as missing; each part is cut to
:data:`PART_MAX` characters. Labels are plain text: escape them where they are rendered.

"The same config" (:func:`comparable_config`): the run's whole ``ExperimentConfig`` (read back through
``ExperimentConfig.from_dict``, so fields an older meta.json lacks take their defaults) without the fields in
:data:`NOT_COMPARED`: ``device`` (the device is what is compared: ``auto``, ``cuda`` and ``cpu`` runs of one config
match), ``timeout_s`` (when the worker is killed: a slower machine may need a longer one) and ``row_limit`` (the
rows of the printed profiler table). Every other field is compared: the workload and its knobs (``size``,
``batch``, ``bias`` for matmul_add), ``dtype``, ``matmul_precision``, ``warmup``, ``compile``, the schedule
(``wait``, ``warmup_steps``, ``active``, ``repeat``), ``threads`` and the profiler's options (``record_shapes``,
``with_flops``, ``with_stack``, ``profile_memory``). A run without a config (an imported trace) matches nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Optional

from .runs import Run

NOT_COMPARED = ("device", "timeout_s", "row_limit")
"""The config fields :func:`comparable_config` leaves out."""
PART_MAX = 120
"""The most characters of a host or device name a machine keeps."""


@dataclass(frozen=True)
class Machine:
    """Where a run ran.

    Attributes:
        key: stable and unique per (host, device): ``json.dumps([host, device])``; ``"unknown"`` for
            :data:`UNKNOWN`.
        label: for people: ``"<device> on <host>"`` (``"<device>"`` where the host is not known); plain text.
        host: the hostname, or None.
        device: the device's name (a GPU's, a CPU's model) or its type, or None.
        kind: the device's type (``cuda``, ``cpu``), or None.
    """

    key: str
    label: str
    host: Optional[str] = None
    device: Optional[str] = None
    kind: Optional[str] = None

    @property
    def known(self) -> bool:
        return self.key != UNKNOWN.key


UNKNOWN = Machine("unknown", "unknown machine")
"""The machine of a run whose meta.json says nothing about where it was recorded (an imported trace)."""


def _text(value: object) -> Optional[str]:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:PART_MAX]


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def machine_of(run: Run) -> Machine:
    """The machine ``run`` ran on, from its meta.json (the module's docstring says which fields)."""
    meta = run.meta if isinstance(run.meta, dict) else {}
    node, device = _dict(meta.get("node")), _dict(meta.get("device"))
    kind = _text(device.get("type"))
    if node:
        host, name = _text(node.get("hostname")), _text(node.get("device_name")) or _text(device.get("name"))
    else:
        if meta.get("source") == "import" or not device:
            return UNKNOWN
        host, name = _text(_dict(meta.get("host")).get("hostname")), _text(device.get("name"))
    name = name or kind
    if host is None and name is None:
        return UNKNOWN
    label = f"{name or 'unknown device'} on {host}" if host else str(name)
    return Machine(json.dumps([host, name]), label, host, name, kind)


def group_by_machine(runs: Iterable[Run]) -> list[tuple[Machine, list[Run]]]:
    """The runs with a usable meta.json (corrupt ones are left out), grouped by :func:`machine_of`: one
    (machine, its runs in the order given) per machine, machines in the order of their first run, the
    :data:`UNKNOWN` machine last."""
    groups: dict[str, tuple[Machine, list[Run]]] = {}
    for run in runs:
        if run.problem is not None:
            continue
        m = machine_of(run)
        groups.setdefault(m.key, (m, []))[1].append(run)
    known = [g for k, g in groups.items() if k != UNKNOWN.key]
    return known + ([groups[UNKNOWN.key]] if UNKNOWN.key in groups else [])


def comparable_config(run: Run) -> Optional[dict]:
    """The run's config without :data:`NOT_COMPARED` (``ExperimentConfig.to_dict``'s fields otherwise, knobs
    included); None for a run without a usable config."""
    cfg = run.config
    if cfg is None:
        return None
    d = cfg.to_dict()
    for f in NOT_COMPARED:
        d.pop(f, None)
    return d


@dataclass(frozen=True)
class ConfigMatch:
    """One config run on two machines or more.

    Attributes:
        key: the compared config as canonical JSON (:func:`comparable_config`, keys sorted).
        name: the config's run name (``ExperimentConfig.name``, e.g. ``64_bf16_warm_eager``).
        machines: (machine, its runs of this config in the order given: newest first from ``RunStore.list``),
            machines in the order of their first run.
    """

    key: str
    name: str
    machines: tuple[tuple[Machine, tuple[Run, ...]], ...]

    @property
    def newest(self) -> list[Run]:
        """Each machine's first run of this config (its newest, in ``RunStore.list``'s order)."""
        return [runs[0] for _m, runs in self.machines]


def match_configs(runs: Iterable[Run]) -> list[ConfigMatch]:
    """The configs that runs on two or more known machines share (:func:`comparable_config`), in the order of
    their first run. Runs of the :data:`UNKNOWN` machine and runs without a config take no part: two traces of
    unknown origin may come from one machine or from two."""
    runs = list(runs)
    pos = {id(run): i for i, run in enumerate(runs)}
    by_key: dict[str, dict[str, tuple[Machine, list[Run]]]] = {}
    names: dict[str, str] = {}
    for machine, group in group_by_machine(runs):
        if not machine.known:
            continue
        for run in group:
            cfg = comparable_config(run)
            if cfg is None:
                continue
            key = json.dumps(cfg, sort_keys=True, default=str)
            names.setdefault(key, run.config.name)
            by_key.setdefault(key, {}).setdefault(machine.key, (machine, []))[1].append(run)
    out = []
    for key, per in by_key.items():
        if len(per) < 2:
            continue
        machines = sorted(per.values(), key=lambda mr: pos[id(mr[1][0])])
        out.append(ConfigMatch(key, names[key], tuple((m, tuple(rs)) for m, rs in machines)))
    return sorted(out, key=lambda c: min(pos[id(rs[0])] for _m, rs in c.machines))
