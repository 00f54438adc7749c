"""Registries carry their metadata: the CLI's choices, help and validation come from them, never a second list."""

import ast
from pathlib import Path

from lbscale.train.config import CHOICES, FIELDS
from lbscale.data.sources import SOURCES
from lbscale.sweep.launchers import LAUNCHERS
from lbscale.task import TASKS
from lbscale.train.optim import OPTIMIZERS
from lbscale.train.policy import SCALING_RULES, SCHEDULES

PACKAGE = Path(__file__).resolve().parents[1] / "lbscale"


def test_config_choices_are_the_registries():
    assert CHOICES["optimizer"] is OPTIMIZERS
    assert CHOICES["lr_scaling"] is SCALING_RULES and CHOICES["schedule"] is SCHEDULES
    assert all(name in FIELDS["optimizer"].metadata["help"] for name in OPTIMIZERS)
    from lbscale.data.transforms import AUGMENT

    assert set(CHOICES["augmentation"]) - {"auto"} == set(AUGMENT)  # every named augmentation has its function


def test_cli_choices_come_from_the_registries(run_cli):
    rc, _, err = run_cli("train", "--data", "x.h5", "--out", "o", "--optimizer", "adagrad")
    assert rc == 2 and all(name in err for name in OPTIMIZERS)
    rc, _, err = run_cli("prepare", "nosuchset", "--out", "x.h5")
    assert rc == 2 and all(name in err for name in SOURCES)
    rc, _, err = run_cli("sweep", "spec.yaml", "--launcher", "pbs")
    assert rc == 2 and all(name in err for name in LAUNCHERS)
    rc, out, _ = run_cli("prepare", "--help")
    assert rc == 0 and all(name in out and cls.help[:20] in out.replace("\n", " ") for name, cls in SOURCES.items())
    rc, out, _ = run_cli("prepare", "--help")
    assert all(name in out for name in TASKS)


def test_sources_take_only_the_options_they_read(run_cli, tmp_path):
    rc, _, err = run_cli("prepare", "sat4", "--src", tmp_path, "--out", tmp_path / "x.h5", "--count", "10")
    assert rc == 2 and err.strip() == "lbscale: error: --count does not apply to sat4"
    assert all(isinstance(cls.options, tuple) for cls in SOURCES.values())


def test_source_options_are_what_the_constructors_take():
    """Each option a source declares (its own, and the common ones it reads) is a keyword of its constructor, and
    none of its own takes the name of an option every source has."""
    import inspect

    from lbscale.cli import prepare as command
    from lbscale.data.prepare import prepare

    common = set(inspect.signature(prepare).parameters)
    for cls in SOURCES.values():
        takes = inspect.signature(cls.__init__).parameters
        assert all(o.name in takes and o.name not in common for o in cls.options), cls
        assert set(cls.common) <= common and all(name in takes for name in cls.common), cls
    names = [p.name for p in command.params]
    assert len(names) == len(set(names))


def test_only_public_imports_of_dependencies():
    private = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                parts = node.module.split(".")
                if parts[0] not in ("lbscale", "__future__") and any(p.startswith("_") for p in parts):
                    private.append(f"{path.name}: {node.module}")
    assert not private
