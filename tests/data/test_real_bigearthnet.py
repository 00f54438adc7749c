"""The six real example patches shipped with bigearthnet-common prepare into a file `data check` accepts."""

import warnings

import numpy as np
import tifffile

from lbscale.data.formats import open_prepared


def _example_folder():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from bigearthnet_common.example_data import get_s2_example_folder_path

        return get_s2_example_folder_path()


def test_real_example_patches(tmp_path, run_cli):
    src = _example_folder()
    assert len([p for p in src.iterdir() if p.is_dir()]) == 6
    out = tmp_path / "ben.h5"
    rc, stdout, err = run_cli("prepare", "bigearthnet", "--src", src, "--out", out, "--workers", "2", "--quiet")
    assert rc == 0, err
    assert "train 4, val 0, test 1" in stdout  # one of the six is a seasonal-snow patch
    rc, stdout, err = run_cli("data", "check", out)
    assert rc == 0 and "OK" in stdout, err
    with open_prepared(out) as f:
        name = f.names("test")[0]
        b02 = tifffile.imread(src / name / f"{name}_B02.tif")
        np.testing.assert_array_equal(f.images("test")[0][1], b02)  # 10 m bands stay bit-exact
        assert f.labels("test").shape == (1, 19) and f.labels("test", "labels_43").shape == (1, 43)
