"""`prepare` records what the pixels show (notes.imagery) for every source, and `lbscale data info` prints it with
the augmentation `augmentation: auto` takes for it; a file prepared before lbscale recorded imagery says so."""

import json

import numpy as np
import pytest

from lbscale.data.formats import open_prepared
from lbscale.data.formats.base import IMAGERY, DatasetMeta
from lbscale.data.prepare import prepare
from lbscale.data.sources.folder import folder_imagery
from lbscale.errors import LbscaleError
from tests.data.imagery_files import RAW, prepared, without_imagery


@pytest.mark.parametrize("kind, imagery, auto", [
    ("sat4", "remote-sensing", "flip-rot90"),
    ("bigearthnet", "remote-sensing", "flip-rot90"),
    ("eurosat", "remote-sensing", "flip-rot90"),
    ("synthetic", "remote-sensing", "flip-rot90"),  # it imitates satellite patches
    ("tiff-folder", "remote-sensing", "flip-rot90"),
    ("png-folder", "photo", "crop-flip"),
    ("cifar10", "photo", "crop-flip"),
    ("jpeg-folder", "photo", "rrc-flip (at decode time)"),
    ("imagenet", "photo", "rrc-flip (at decode time)"),
    ("mnist", "digits", "none"),
    ("kmnist", "characters", "none"),
    ("fashion-mnist", "objects", "crop-flip"),
])
def test_each_source_records_its_imagery_and_data_info_prints_auto(kind, imagery, auto, tmp_path, run_cli):
    path = prepared(kind, tmp_path)
    with open_prepared(path) as f:
        assert f.imagery == imagery
    rc, out, err = run_cli("data", "info", path)
    assert rc == 0, err
    assert f"\n  imagery: {imagery}: auto augmentation takes {auto}\n" in out


@pytest.mark.parametrize("kind", ["arrays", "idx"])
def test_sources_that_cannot_tell_record_unknown(kind, tmp_path, run_cli):
    path = prepared(kind, tmp_path)
    with open_prepared(path) as f:
        assert f.imagery == "unknown" and f.notes["imagery"] == "unknown"
    rc, out, _ = run_cli("data", "info", path)
    assert rc == 0 and ("  imagery: unknown (its source cannot tell what the pixels show): auto augmentation takes "
                        "flip-rot90 as before; --augmentation chooses another\n") in out


def test_file_prepared_before_imagery_was_recorded_says_so(tmp_path, run_cli):
    path = without_imagery(prepared("cifar10", tmp_path))  # photos, which auto now crops; then it flipped and turned
    with open_prepared(path) as f:
        assert f.imagery is None and "imagery" not in f.notes
    rc, out, _ = run_cli("data", "info", path)
    assert rc == 0 and ("\n  imagery: not recorded (prepared before lbscale recorded it): auto augmentation takes "
                        "flip-rot90 as before\n") in out


def test_a_folder_mixing_tiff_with_png_is_neither(tmp_path):
    tif, png = tmp_path / "a.tif", tmp_path / "b.PNG"
    assert folder_imagery({"train": [tif], "test": [tif]}) == "remote-sensing"
    assert folder_imagery({"train": [png]}) == "photo"
    assert folder_imagery({"train": [tif], "val": [png]}) == "unknown"


def test_every_new_file_says_what_it_shows():
    assert DatasetMeta("d", "multiclass", ["a"], ["b"], "v").notes == {"imagery": "unknown"}
    meta = DatasetMeta("d", "multiclass", ["a"], ["b"], "v", notes={"imagery": "photo", "x": "1"})
    assert meta.notes == {"imagery": "photo", "x": "1"}


@pytest.mark.parametrize("kind", sorted(RAW))
def test_imagery_given_overrides_what_every_source_records(kind, tmp_path):
    given = "digits" if kind == "fashion-mnist" else "objects"  # never what the source itself records
    with open_prepared(prepared(kind, tmp_path, imagery=given)) as f:
        assert f.imagery == given


def _digits(tmp_path):
    """8 px single-band 'digits' as a user's arrays: the case `auto` must not flip and turn."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.integers(0, 256, (120, 8, 8), dtype=np.uint8))
    np.save(tmp_path / "y.npy", np.arange(120) % 4)
    return ["prepare", "arrays", "--images", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--quiet"]


def test_arrays_record_the_imagery_given_say_so_and_auto_trains_by_it(tmp_path, run_cli):
    out = tmp_path / "digits.h5"
    rc, stdout, err = run_cli(*_digits(tmp_path), "--imagery", "digits", "--out", out)
    assert rc == 0, err
    assert stdout == f"wrote {out}: train 84, val 12, test 24; imagery digits: auto augmentation takes none\n"
    rc, info, _ = run_cli("data", "info", out)
    assert rc == 0 and "\n  imagery: digits: auto augmentation takes none\n" in info
    rc, _, err = run_cli("train", "--data", out, "--out", tmp_path / "t", "--model", "test_resnet", "--epochs", "1",
                         "--global-batch", "32", "--device", "cpu", "--quiet")
    assert rc == 0, err
    assert json.loads((tmp_path / "t" / "config.json").read_text())["augmentation"] == "none"  # what auto took


def test_without_imagery_the_outcome_line_says_how_to_give_it(tmp_path, run_cli):
    out = tmp_path / "plain.h5"
    rc, stdout, err = run_cli(*_digits(tmp_path), "--out", out)
    assert rc == 0, err
    assert stdout == (f"wrote {out}: train 84, val 12, test 24; imagery unknown (--imagery says what the pixels "
                      "show): auto augmentation takes flip-rot90\n")


def test_an_unknown_imagery_is_one_line_naming_the_known_ones(tmp_path, run_cli):
    out = tmp_path / "x.h5"
    rc, _, err = run_cli(*_digits(tmp_path), "--imagery", "satellite", "--out", out)
    assert rc == 2 and err.count("\n") == 1 and "satellite" in err, err
    assert all(kind in err for kind in IMAGERY)
    assert not out.exists() and not list(tmp_path.glob(".x.h5*"))
    with pytest.raises(LbscaleError, match="unknown --imagery 'unknown'; choose one of remote-sensing, photo, "
                                           "objects, digits, characters"):
        prepare("synthetic", None, out, imagery="unknown", count=100)
    assert not out.exists()
