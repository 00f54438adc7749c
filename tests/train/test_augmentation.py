"""`augmentation: auto` takes the augmentation that fits what a prepared file's pixels show (its recorded imagery),
files without the record keep flip-rot90, and a trial's config.json says which one it trained with."""

import json

import pytest
import torch

from lbscale.train.config import AUGMENTATIONS, TrialConfig
from lbscale.data.formats import open_prepared
from lbscale.data.formats.base import ENCODED_AUGMENTATION, FALLBACK_AUGMENTATION, IMAGERY
from lbscale.data.transforms import AUGMENT
from lbscale.errors import LbscaleError
from lbscale.train.data_checks import check_trial_data
from lbscale.train.plan import resolve_augmentation
from tests.data.imagery_files import prepared, without_imagery


def _resolved(path, **options) -> str:
    with open_prepared(path) as f:
        return check_trial_data(TrialConfig(**options), f, 1).augmentation


@pytest.mark.parametrize("kind, imagery, expected", [
    ("synthetic", "remote-sensing", "flip-rot90"),
    ("png-folder", "photo", "crop-flip"),
    ("cifar10", "photo", "crop-flip"),
    ("jpeg-folder", "photo", "rrc-flip"),  # cropped and flipped at decode time, whatever it shows
    ("mnist", "digits", "none"),
    ("kmnist", "characters", "none"),
    ("fashion-mnist", "objects", "crop-flip"),
    ("arrays", "unknown", "flip-rot90"),
    ("idx", "unknown", "flip-rot90"),
])
def test_auto_resolves_per_imagery_of_a_prepared_file(kind, imagery, expected, tmp_path):
    path = prepared(kind, tmp_path)
    with open_prepared(path) as f:
        assert f.imagery == imagery
    assert _resolved(path) == expected


def test_file_without_the_imagery_note_resolves_to_flip_rot90(tmp_path, run_cli):
    path = prepared("cifar10", tmp_path)
    assert _resolved(path) == "crop-flip"
    without_imagery(path)  # as prepared before lbscale recorded imagery: auto was flip-rot90 for all pixel data
    assert _resolved(path) == "flip-rot90"
    rc, out, _ = run_cli("data", "info", path)
    assert rc == 0 and ("  imagery: not recorded (prepared before lbscale recorded it): auto augmentation takes "
                        "flip-rot90 as before\n") in out


@pytest.mark.parametrize("kind, expected", [("mnist", "none"), ("cifar10", "crop-flip")])
def test_train_records_the_augmentation_resolved_for_its_file(kind, expected, tmp_path, run_cli):
    path, out = prepared(kind, tmp_path / "data"), tmp_path / "trial"
    rc, _, err = run_cli("train", "--data", path, "--out", out, "--model", "test_resnet", "--epochs", "1",
                         "--global-batch", "32", "--device", "cpu", "--quiet")
    assert rc == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["augmentation"] == expected and config["config"]["augmentation"] == "auto"


def test_a_choice_overrides_auto_and_no_augment_records_none(tmp_path):
    digits = prepared("mnist", tmp_path)
    assert _resolved(digits, augmentation="flip-rot90") == "flip-rot90"
    assert _resolved(digits, augmentation="crop-flip", augment=False) == "none"  # what the trial trains with
    assert resolve_augmentation("auto", "jpeg", None) == "rrc-flip"  # JPEG files prepared before: as before
    with pytest.raises(LbscaleError, match="--augmentation none: JPEG data is augmented at decode time"):
        resolve_augmentation("none", "jpeg", "photo")


def test_none_returns_its_input_unchanged():
    x = torch.randn(5, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    expected = x.clone()
    generator = torch.Generator().manual_seed(1)
    state = generator.get_state()
    out = AUGMENT["none"](x, generator)
    assert torch.equal(out, expected) and out.dtype == expected.dtype and out.shape == expected.shape
    assert torch.equal(generator.get_state(), state)  # draws nothing from the rank's generator
    assert not torch.equal(AUGMENT["crop-flip"](x, generator), expected)  # the value check can fail


def test_every_imagery_picks_a_registered_augmentation():
    picked = {*IMAGERY.values(), FALLBACK_AUGMENTATION, ENCODED_AUGMENTATION}
    assert picked <= set(AUGMENT) and picked <= set(AUGMENTATIONS)
    assert IMAGERY["digits"] == IMAGERY["characters"] == "none" and IMAGERY["remote-sensing"] == "flip-rot90"
