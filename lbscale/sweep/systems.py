"""Cluster profiles: the shipped systems.yaml, extended by a user's file."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import yaml

from lbscale.errors import LbscaleError

KEYS = {"extends", "account", "partition", "time", "gpus_per_node", "gres", "cpus_per_task", "modules",
        "environment", "srun_args", "rendezvous_suffix"}
HOST_PART = re.compile(r"^[A-Za-z0-9.-]*$")  # what a rendezvous suffix may add to a host name
SBATCH_SAFE = re.compile(r"^[A-Za-z0-9._:@%/+=,{}-]+$")


def _read(path_or_text, where: str) -> dict:
    try:
        data = yaml.safe_load(path_or_text) or {}
    except yaml.YAMLError as e:
        raise LbscaleError(f"{where}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise LbscaleError(f"{where}: expected a mapping of system name -> profile")
    for name, prof in data.items():
        unknown = sorted(set(prof) - KEYS)
        if unknown:
            raise LbscaleError(f"{where}: system {name}: unknown key {unknown[0]!r}")
    return data


def load_systems(user_file: str | Path | None = None) -> dict:
    text = resources.files("lbscale.sweep").joinpath("systems.yaml").read_text()
    systems = _read(text, "systems.yaml")
    if user_file:
        path = Path(user_file)
        if not path.exists():
            raise LbscaleError(f"{path}: no such file")
        systems.update(_read(path.read_text(), str(path)))
    return systems


def get_system(name: str, user_file: str | Path | None = None, **overrides) -> dict:
    """The resolved profile `name` (extends followed), with non-None overrides applied and values checked."""
    systems = load_systems(user_file)
    if name not in systems:
        raise LbscaleError(f"unknown system {name!r}; known: {', '.join(sorted(systems))}")
    chain, prof = [], {}
    cur = name
    while cur:
        if cur in chain or cur not in systems:
            raise LbscaleError(f"system {name}: bad 'extends' chain at {cur!r}")
        chain.append(cur)
        cur = systems[cur].get("extends")
    for n in reversed(chain):
        base_env, own_env = prof.get("environment"), systems[n].get("environment")
        prof.update({k: v for k, v in systems[n].items() if k != "extends"})
        if isinstance(base_env, dict) and isinstance(own_env, dict):  # a profile adds to its base's settings
            prof["environment"] = {**base_env, **own_env}
    prof.update({k: v for k, v in overrides.items() if v is not None})
    prof["name"] = name
    gpn = prof.get("gpus_per_node")
    if not isinstance(gpn, int) or gpn < 1:
        raise LbscaleError(f"system {name}: gpus_per_node must be an integer >= 1")
    for key in ("account", "partition", "time", "gres", "cpus_per_task"):
        value = prof.get(key)
        if value is not None and not SBATCH_SAFE.fullmatch(str(value)):
            raise LbscaleError(f"system {name}: unsafe {key} value {str(value)!r} for an #SBATCH line")
    suffix = prof.get("rendezvous_suffix")
    if suffix is not None and not (isinstance(suffix, str) and HOST_PART.fullmatch(suffix)):
        raise LbscaleError(f"system {name}: rendezvous_suffix must be letters, digits, '.' or '-' (got {suffix!r})")
    for key in ("modules", "srun_args"):
        if not isinstance(prof.get(key) or [], list):
            raise LbscaleError(f"system {name}: {key} must be a list")
    if not isinstance(prof.get("environment") or {}, dict):
        raise LbscaleError(f"system {name}: environment must be a mapping")
    for value in [*map(str, prof.get("modules") or []), *map(str, (prof.get("environment") or {}).values()),
                  *map(str, prof.get("environment") or {}), *map(str, prof.get("srun_args") or [])]:
        if "\n" in value or "\r" in value or "\0" in value:
            raise LbscaleError(f"system {name}: a value contains a line break: {value!r}")
    for var in prof.get("environment") or {}:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(var)):
            raise LbscaleError(f"system {name}: {var!r} is not an environment variable name")
    return prof
