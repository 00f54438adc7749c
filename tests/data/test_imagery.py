"""`prepare` records what the pixels show (notes.imagery) for every source, and `lbscale data info` prints it with
the augmentation `augmentation: auto` takes for it; a file prepared before lbscale recorded imagery says so."""

import pytest

from lbscale.data.formats import open_prepared
from lbscale.data.formats.base import DatasetMeta
from lbscale.data.sources.folder import folder_imagery
from tests.data.imagery_files import prepared, without_imagery


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
